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
	extras, err := parseBinders(extra, b)
	if err != nil {
		return err
	}
	began := time.Now()
	var rows, chart []sim.Row
	for _, sc := range sim.Scenarios() {
		if only != "" && sc.Name != only {
			continue
		}
		binders := []sim.Binder{b}
		if sc.Name == "h100-mixed" {
			binders = append(binders, extras...)
		}
		for _, bb := range binders {
			runs, err := runModes(sc, bb)
			if err != nil {
				return err
			}
			rows = append(rows, runs...)
			if bb == b {
				chart = append(chart, runs...)
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
	if _, err := os.Stdout.Write(table.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fleetsim: %d runs in %s\n", len(rows), time.Since(began).Round(time.Millisecond))
	if out == "" {
		return nil
	}
	return write(out, table.Bytes(), chart)
}

// parseBinders reads a comma-separated list of binders, leaving out def.
func parseBinders(list string, def sim.Binder) ([]sim.Binder, error) {
	var out []sim.Binder
	if list == "" {
		return nil, nil
	}
	for e := range strings.SplitSeq(list, ",") {
		b, err := sim.ParseBinder(strings.TrimSpace(e))
		if err != nil {
			return nil, err
		}
		if b != def {
			out = append(out, b)
		}
	}
	return out, nil
}

// runModes runs a scenario in every mode with one binder, the function
// assuming the binding that matches it.
func runModes(sc sim.Scenario, b sim.Binder) ([]sim.Row, error) {
	limit := sim.PhysicalLimit(sc)
	var rows []sim.Row
	for _, m := range sim.Modes() {
		res, err := sim.Run(sc.Config(m, b, sim.Direct{Binding: sim.AssumedBinding(b)}))
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", sc.Name, m.Name, err)
		}
		rows = append(rows, sim.Row{Scenario: sc, Mode: m, Binder: b, Result: res, Limit: limit})
	}
	return rows, nil
}

// write writes the table to out/fleetsim.md and the chart to
// out/fleetsim.svg.
func write(out string, table []byte, chart []sim.Row) error {
	var md bytes.Buffer
	md.WriteString("<!-- Written by `go run ./cmd/fleetsim -out docs/`; do not edit. -->\n\n")
	md.Write(table)
	// The report is documentation, for everyone to read.
	if err := os.WriteFile(filepath.Join(out, "fleetsim.md"), md.Bytes(), 0o644); err != nil { //nolint:gosec // See above.
		return err
	}
	var svg bytes.Buffer
	if err := sim.WriteChart(&svg, chart, 10*time.Second); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "fleetsim.svg"), svg.Bytes(), 0o644) //nolint:gosec // Documentation, as above.
}
