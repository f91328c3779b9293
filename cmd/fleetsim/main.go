// Command fleetsim runs every fleet simulator scenario in every mode, through
// the real observation and scheduling packages, and writes the results as a
// Markdown table (fleetsim.md) and an SVG chart (fleetsim.svg).
//
//	go run ./cmd/fleetsim -out docs/
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/sim"
)

func main() {
	out := flag.String("out", "", "directory to write fleetsim.md and fleetsim.svg to; empty prints the table only")
	binder := flag.String("binder", string(sim.LeastAllocated), "how the simulated kube-scheduler binds pods: least-allocated, most-allocated or random")
	extra := flag.String("extra-binders", "most-allocated,random", "comma-separated binders to also run the h100-mixed scenario with (empty for none)")
	only := flag.String("scenario", "", "run only the scenario of this name")
	flag.Parse()
	if err := run(*out, *binder, *extra, *only); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run(out, binderName, extra, only string) error {
	b, err := sim.ParseBinder(binderName)
	if err != nil {
		return err
	}
	start := time.Now()
	var rows, chart []sim.Row
	for _, sc := range sim.Scenarios() {
		if only != "" && sc.Name != only {
			continue
		}
		binders := []sim.Binder{b}
		if sc.Name == "h100-mixed" && extra != "" {
			for _, e := range strings.Split(extra, ",") {
				eb, err := sim.ParseBinder(strings.TrimSpace(e))
				if err != nil {
					return err
				}
				if eb != b {
					binders = append(binders, eb)
				}
			}
		}
		limit := sim.PhysicalLimit(sc)
		for _, bb := range binders {
			for _, m := range sim.Modes {
				rec := sim.Direct{Binding: sim.AssumedBinding(bb)}
				res, err := sim.Run(sc.Config(m, bb, rec))
				if err != nil {
					return fmt.Errorf("%s, %s: %w", sc.Name, m.Name, err)
				}
				row := sim.Row{Scenario: sc, Mode: m, Binder: bb, Result: res, Limit: limit}
				rows = append(rows, row)
				if bb == b {
					chart = append(chart, row)
				}
			}
		}
	}
	var table bytes.Buffer
	if err := sim.WriteTable(&table, rows); err != nil {
		return err
	}
	table.WriteString("\nReplicas placed by shape, in the scenarios that mix shapes:\n\n")
	if err := sim.WriteShapeTable(&table, rows); err != nil {
		return err
	}
	fmt.Print(table.String())
	fmt.Fprintf(os.Stderr, "fleetsim: %d runs in %s\n", len(rows), time.Since(start).Round(time.Millisecond))
	if out == "" {
		return nil
	}
	var md bytes.Buffer
	md.WriteString("<!-- Written by `go run ./cmd/fleetsim -out docs/`; do not edit. -->\n\n")
	md.Write(table.Bytes())
	if err := os.WriteFile(filepath.Join(out, "fleetsim.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	var svg bytes.Buffer
	if err := sim.WriteChart(&svg, chart, 10*time.Second); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "fleetsim.svg"), svg.Bytes(), 0o644)
}
