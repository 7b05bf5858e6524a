package main

import (
	"fmt"
	"io"
	"strconv"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// setupLogging sends controller-runtime's and client-go's logs to w in the
// chosen format and level.
func setupLogging(g *globalFlags, w io.Writer) error {
	o := zap.Options{DestWriter: w, TimeEncoder: zapcore.RFC3339NanoTimeEncoder}
	switch g.logFormat {
	case "json":
	case "console":
		o.Development = true
		o.StacktraceLevel = zapcore.PanicLevel
	default:
		return fmt.Errorf("--log-format %q: want console or json", g.logFormat)
	}
	switch g.logLevel {
	case "error":
		o.Level = zapcore.ErrorLevel
	case "info":
		o.Level = zapcore.InfoLevel
	case "debug":
		o.Level = zapcore.DebugLevel
	default:
		n, err := strconv.Atoi(g.logLevel)
		if err != nil || n < 0 {
			return fmt.Errorf("--log-level %q: want error, info, debug or a number >= 0", g.logLevel)
		}
		o.Level = zapcore.Level(-n) //nolint:gosec // bounded by the check above
	}
	logger := zap.New(zap.UseFlagOptions(&o))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return nil
}
