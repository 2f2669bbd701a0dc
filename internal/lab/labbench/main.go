// Command labbench times lab up and lab down (make bench-lab): a lab of
// 2 nodes x 2 pods and one of 32 nodes x 4 pods by default, on each backend
// asked for, and prints the figures against the targets (< 2 s and < 30 s
// for up plus down). It needs root; its lab is named "lbench" and is
// removed even when a step fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
)

type size struct {
	nodes, pods int
	target      time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "labbench: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	backends := flag.String("backends", "host-gw,vxlan", "backends to time, comma-separated")
	repeat := flag.Int("repeat", 1, "runs per size and backend")
	stateDir := flag.String("state-dir", "", "state directory (default: a temporary one)")
	flag.Parse()
	if err := lab.CheckPrivileges(); err != nil {
		return err
	}
	if *repeat < 1 {
		return fmt.Errorf("--repeat %d: want at least 1", *repeat)
	}
	dir := *stateDir
	if dir == "" {
		d, err := os.MkdirTemp("", "labbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sizes := []size{{2, 2, 2 * time.Second}, {32, 4, 30 * time.Second}}
	fmt.Printf("%-8s %-14s %10s %10s %10s %8s\n", "backend", "size", "up", "down", "total", "target")
	var failed []string
	for _, be := range strings.Split(*backends, ",") {
		for _, s := range sizes {
			for i := 0; i < *repeat; i++ {
				cfg := lab.Config{Name: "lbench", Nodes: s.nodes, PodsPerNode: s.pods, Backend: be, StateDir: dir}
				t0 := time.Now()
				l, err := lab.Up(ctx, cfg, log)
				up := time.Since(t0)
				if err != nil {
					return err
				}
				t1 := time.Now()
				_, err = l.Down(ctx)
				down := time.Since(t1)
				if err != nil {
					return err
				}
				total := up + down
				mark := "ok"
				if total >= s.target {
					mark = "MISSED"
					failed = append(failed, fmt.Sprintf("%s %dx%d", be, s.nodes, s.pods))
				}
				fmt.Printf("%-8s %-14s %10s %10s %10s %8s %s\n", be, fmt.Sprintf("%d nodes x %d", s.nodes, s.pods),
					up.Round(time.Millisecond), down.Round(time.Millisecond), total.Round(time.Millisecond), "< "+s.target.String(), mark)
			}
		}
	}
	if len(failed) > 0 {
		return errors.New("targets missed: " + strings.Join(failed, "; "))
	}
	return nil
}
