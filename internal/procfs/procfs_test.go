package procfs

import (
	"os"
	"testing"
)

func TestStatFields(t *testing.T) {
	// Field 3 onwards of a real line shape, with a command name that holds
	// a space and parentheses.
	line := "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 123 456 789 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	tests := []struct {
		field int
		want  uint64
	}{
		{Utime, 7},
		{Stime, 3},
		{Processor, 1},
	}
	f, ok := StatFields(line)
	if !ok {
		t.Fatal("no fields")
	}
	if f[0] != "S" {
		t.Fatalf("field 3 = %q, want the state S", f[0])
	}
	for _, tc := range tests {
		got, err := Field(f, tc.field)
		if err != nil || got != tc.want {
			t.Errorf("Field(%d) = %d, %v; want %d", tc.field, got, err, tc.want)
		}
	}
	if _, err := Field(f, 60); err == nil {
		t.Error("field 60 of a short line: no error")
	}
	if _, ok := StatFields("4242 no parenthesis S 1"); ok {
		t.Error("a line without ')' split")
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	f, err := ReadStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if _, err := Field(f, Processor); err != nil {
		t.Fatalf("this process's stat: %v", err)
	}
}
