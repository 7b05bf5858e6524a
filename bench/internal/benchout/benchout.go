// Package benchout prints the machine-readable lines every benchmark ends
// with, which bench/table collects into one table:
//
//	BENCH <name> <value> <unit> [<ratio>]
//
// name has no spaces (bench.figure); value is lower-is-better; ratio, when
// present, is value against a floor measured in the same run.
package benchout

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Out is where the lines go; standard output by default.
var Out io.Writer = os.Stdout

// Line prints one figure without a ratio.
func Line(name string, value float64, unit string) {
	_, _ = fmt.Fprintf(Out, "BENCH %s %s %s\n", clean(name), format(value), unit)
}

// Ratio prints one figure with its ratio to the floor measured in the same
// run.
func Ratio(name string, value float64, unit string, ratio float64) {
	_, _ = fmt.Fprintf(Out, "BENCH %s %s %s %.2f\n", clean(name), format(value), unit, ratio)
}

func clean(s string) string { return strings.ReplaceAll(s, " ", "_") }

func format(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
