// Command table collects the machine-readable lines the benchmarks print
//
//	BENCH <name> <value> <unit> [<ratio>]
//
// from its input (files, or standard input), prints them as one table, and
// compares each figure with the baseline stored in bench/README.md between
// the markers <!-- bench-baseline:begin --> and <!-- bench-baseline:end -->.
// Every figure is lower-is-better. A figure with a ratio (to a floor
// measured in the same run) is compared by its ratio, which depends less on
// the machine; others by their value. A change of more than -threshold
// (20 %) for the worse is flagged REGRESSED, and the exit code is 3 with
// -fail-on-regression.
//
// With -write, the baseline section of the README is replaced by this run's
// lines, stamped with the date, the load average and the commit.
//
//	go run ./bench/table [-baseline bench/README.md] [-write] bench-*.log
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const (
	beginMarker = "<!-- bench-baseline:begin -->"
	endMarker   = "<!-- bench-baseline:end -->"
)

// figure is one BENCH line.
type figure struct {
	name     string
	value    float64
	unit     string
	ratio    float64
	hasRatio bool
}

func main() {
	baseline := flag.String("baseline", "bench/README.md", "the file holding the baseline section")
	threshold := flag.Float64("threshold", 0.20, "flag a change for the worse larger than this fraction")
	write := flag.Bool("write", false, "replace the baseline section with this run's figures")
	failOnRegression := flag.Bool("fail-on-regression", false, "exit 3 when a figure regressed")
	flag.Parse()
	if err := run(*baseline, *threshold, *write, *failOnRegression, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "bench/table:", err)
		var re regressedError
		if errors.As(err, &re) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

type regressedError int

func (e regressedError) Error() string { return fmt.Sprintf("%d figure(s) regressed", int(e)) }

func run(baselinePath string, threshold float64, write, failOnRegression bool, files []string) error {
	var cur []figure
	if len(files) == 0 {
		cur = parse(os.Stdin)
	}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		cur = append(cur, parse(r)...)
		_ = r.Close()
	}
	if len(cur) == 0 {
		return errors.New("no BENCH lines in the input")
	}
	readme, err := os.ReadFile(baselinePath)
	if err != nil {
		return err
	}
	base := map[string]figure{}
	if sec, ok := section(string(readme)); ok {
		for _, f := range parse(strings.NewReader(sec)) {
			base[f.name] = f
		}
	}
	regressed := print(os.Stdout, cur, base, threshold)
	if write {
		if err := writeBaseline(baselinePath, string(readme), cur); err != nil {
			return err
		}
		fmt.Printf("\nbaseline in %s replaced by this run\n", baselinePath)
	}
	if regressed > 0 {
		fmt.Printf("\n%d figure(s) REGRESSED by more than %.0f%% against the baseline in %s\n", regressed, threshold*100, baselinePath)
		if failOnRegression {
			return regressedError(regressed)
		}
	}
	return nil
}

// parse reads the BENCH lines of r; other lines are ignored.
func parse(r io.Reader) []figure {
	var out []figure
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != "BENCH" {
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		fig := figure{name: f[1], value: v, unit: f[3]}
		if len(f) > 4 {
			if r, err := strconv.ParseFloat(f[4], 64); err == nil {
				fig.ratio, fig.hasRatio = r, true
			}
		}
		out = append(out, fig)
	}
	return out
}

// section returns the text between the baseline markers.
func section(s string) (string, bool) {
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return "", false
	}
	return s[i+len(beginMarker) : j], true
}

// print writes the table and returns how many figures regressed.
func print(w io.Writer, cur []figure, base map[string]figure, threshold float64) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tfigure\tvalue\tratio to floor\tbaseline\tchange\t")
	regressed := 0
	for _, f := range cur {
		bench, fig, _ := strings.Cut(f.name, ".")
		ratio := "-"
		if f.hasRatio {
			ratio = fmt.Sprintf("%.2fx", f.ratio)
		}
		b, ok := base[f.name]
		baseCol, change := "-", "new"
		if ok {
			var now, then float64
			if f.hasRatio && b.hasRatio {
				now, then = f.ratio, b.ratio
				baseCol = fmt.Sprintf("%s %s, %.2fx", num(b.value), b.unit, b.ratio)
			} else {
				now, then = f.value, b.value
				baseCol = fmt.Sprintf("%s %s", num(b.value), b.unit)
			}
			change = "="
			if then > 0 {
				d := now/then - 1
				change = fmt.Sprintf("%+.0f%%", d*100)
				if d > threshold {
					change += " REGRESSED"
					regressed++
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\t\n", bench, fig, num(f.value), f.unit, ratio, baseCol, change)
	}
	_ = tw.Flush()
	return regressed
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// writeBaseline replaces (or appends) the baseline section.
func writeBaseline(path, readme string, cur []figure) error {
	var b strings.Builder
	commit := "?"
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	load := "?"
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(l))[:3], " ")
	}
	fmt.Fprintf(&b, "%s\n```text\n# %s, commit %s, load average %s\n", beginMarker, time.Now().UTC().Format("2006-01-02 15:04 MST"), commit, load)
	for _, f := range cur {
		if f.hasRatio {
			fmt.Fprintf(&b, "BENCH %s %s %s %.2f\n", f.name, num(f.value), f.unit, f.ratio)
		} else {
			fmt.Fprintf(&b, "BENCH %s %s %s\n", f.name, num(f.value), f.unit)
		}
	}
	b.WriteString("```\n" + endMarker)
	i := strings.Index(readme, beginMarker)
	j := strings.Index(readme, endMarker)
	var out string
	if i >= 0 && j > i {
		out = readme[:i] + b.String() + readme[j+len(endMarker):]
	} else {
		out = strings.TrimRight(readme, "\n") + "\n\n" + b.String() + "\n"
	}
	return os.WriteFile(path, []byte(out), 0o644) //nolint:gosec // the path is the -baseline flag
}
