package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// outputFlags are kubectl's -o/--output for a verb that prints: json and
// yaml print the verb's data, wide its table with the extra columns it has
// (the same table where it has none, as kubectl does), csv and markdown
// its table as CSV or a Markdown table (the data's fields, one per row,
// where the verb prints no table), and "" or table the table. --json, the
// older spelling, stays as -o json.
type outputFlags struct {
	format string
	asJSON bool
}

// outputFormats are the -o values every printing verb takes.
var outputFormats = []string{"table", "wide", "json", "yaml", "csv", "markdown"}

func (o *outputFlags) register(cmd *cobra.Command) {
	o.registerOutput(cmd)
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print JSON (-o json)")
}

// registerOutput registers -o alone, for a verb that has its own --json.
func (o *outputFlags) registerOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "output format: "+strings.Join(outputFormats, ", ")+" (default table)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// check validates the flags before anything is asked of a server.
func (o *outputFlags) check() error {
	if o.format != "" && !slices.Contains(outputFormats, o.format) {
		return fmt.Errorf("-o %q: want one of %s", o.format, strings.Join(outputFormats, ", "))
	}
	if o.asJSON && o.format != "" && o.format != "json" {
		return fmt.Errorf("--json and -o %s: give one", o.format)
	}
	return nil
}

// structured reports whether the data is printed as data (json, yaml)
// rather than as a table.
func (o *outputFlags) structured() bool {
	return o.asJSON || o.format == "json" || o.format == "yaml"
}

// wide reports whether a table should show its extra columns.
func (o *outputFlags) wide() bool { return o.format == "wide" }

// print writes v as JSON or YAML when that was asked for and reports
// whether it did; the caller prints its table otherwise (through table,
// so that -o csv and -o markdown apply to it).
func (o *outputFlags) print(w io.Writer, v any) (bool, error) {
	switch {
	case o.format == "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("-o yaml: %w", err)
		}
		_, err = w.Write(b)
		return true, err
	case o.structured():
		return true, printJSON(w, v)
	}
	return false, nil
}

// printData is print for a verb that prints no table: -o csv and -o
// markdown print v's fields, one row each (FIELD, VALUE; nested fields
// joined with dots, list items by their index).
func (o *outputFlags) printData(w io.Writer, v any) (bool, error) {
	if ok, err := o.print(w, v); ok {
		return true, err
	}
	if o.format != "csv" && o.format != "markdown" {
		return false, nil
	}
	rows, err := fieldRows(v)
	if err != nil {
		return true, err
	}
	t := o.table(w)
	fmt.Fprintln(t, "FIELD\tVALUE")
	for _, r := range rows {
		fmt.Fprintf(t, "%s\t%s\n", r[0], r[1])
	}
	return true, t.Flush()
}

// tableWriter takes a table as text/tabwriter does (cells ended by tabs,
// rows by newlines) and writes it on Flush.
type tableWriter interface {
	io.Writer
	Flush() error
}

// table returns the writer a verb's table goes to: aligned columns, or
// with -o csv a CSV document and with -o markdown a Markdown table. A
// blank line starts another table (its first row is its header).
func (o *outputFlags) table(w io.Writer) tableWriter {
	switch o.format {
	case "csv", "markdown":
		return &cellWriter{w: w, markdown: o.format == "markdown"}
	}
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// cellWriter gathers tab-separated rows and writes them as CSV or
// Markdown.
type cellWriter struct {
	w        io.Writer
	markdown bool
	buf      bytes.Buffer
	blocks   int // tables written so far
}

func (c *cellWriter) Write(p []byte) (int, error) { return c.buf.Write(p) }

func (c *cellWriter) Flush() error {
	var blocks [][][]string
	var cur [][]string
	for _, line := range strings.Split(strings.TrimRight(c.buf.String(), "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			if len(cur) > 0 {
				blocks = append(blocks, cur)
				cur = nil
			}
			continue
		}
		cells := strings.Split(strings.TrimSuffix(line, "\t"), "\t")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		cur = append(cur, cells)
	}
	if len(cur) > 0 {
		blocks = append(blocks, cur)
	}
	c.buf.Reset()
	for _, b := range blocks {
		if c.blocks > 0 {
			fmt.Fprintln(c.w)
		}
		c.blocks++
		var err error
		if c.markdown {
			err = writeMarkdownTable(c.w, b)
		} else {
			cw := csv.NewWriter(c.w)
			err = cw.WriteAll(b)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeMarkdownTable writes rows as a Markdown table, the first row its
// header.
func writeMarkdownTable(w io.Writer, rows [][]string) error {
	n := 0
	for _, r := range rows {
		n = max(n, len(r))
	}
	line := func(cells []string) string {
		out := make([]string, n)
		for i := range out {
			if i < len(cells) {
				out[i] = strings.ReplaceAll(strings.ReplaceAll(cells[i], "|", `\|`), "\n", " ")
			}
		}
		return "| " + strings.Join(out, " | ") + " |\n"
	}
	var b strings.Builder
	b.WriteString(line(rows[0]))
	b.WriteString("|" + strings.Repeat(" --- |", n) + "\n")
	for _, r := range rows[1:] {
		b.WriteString(line(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fieldRows flattens v's JSON form into (field, value) rows in the order
// its fields are written.
func fieldRows(v any) ([][2]string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var rows [][2]string
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			i := 0
			for dec.More() {
				key := strconv.Itoa(i)
				if t == '{' {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					key = fmt.Sprint(k)
				}
				p := key
				if path != "" {
					p = path + "." + key
				}
				if err := walk(p); err != nil {
					return err
				}
				i++
			}
			_, err := dec.Token() // the closing delimiter
			return err
		case nil:
			rows = append(rows, [2]string{path, ""})
		default:
			rows = append(rows, [2]string{path, fmt.Sprint(t)})
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("flatten output: %w", err)
	}
	return rows, nil
}

// prose is where a verb's sentences around its table go: standard output,
// or standard error with -o csv and -o markdown, so that standard output
// holds only the table.
func (o *outputFlags) prose(st Streams) io.Writer {
	if o.format == "csv" || o.format == "markdown" {
		return st.Err
	}
	return st.Out
}
