package main

import (
	"context"
	"flag"
	"io"
	"runtime"
	"runtime/debug"
	"time"
)

var versionCommand = &command{
	name: "version", maxArgs: 0,
	summary: "the version of the command, from its build information",
	doc: `The module version the command was built from (a release tag when it was
installed with go install ...@VERSION, "(devel)" when built from a
checkout), the version control revision and time when the build stamped
them, and the Go version. It does not contact the backend.`,
	setup: func(*flag.FlagSet) action {
		return func(_ context.Context, inv *invocation, _ []string) error {
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				return failf("this binary carries no build information (built without module support)")
			}
			v := versionOf(bi)
			return inv.show(v, func(w io.Writer, p printer) { printVersion(w, p, v) })
		}
	},
}

// versionInfo is what simba version prints.
type versionInfo struct {
	// Module is the main module's path and Version its version:
	// "v1.2.3", a pseudo-version, or "(devel)".
	Module  string `json:"module"`
	Version string `json:"version"`
	// Revision, Time and Modified are the version control information
	// stamped by the build, when it was (go build -buildvcs).
	Revision string     `json:"revision,omitempty"`
	Time     *time.Time `json:"time,omitempty"`
	Modified bool       `json:"modified,omitempty"`
	Go       string     `json:"go"`
	Platform string     `json:"platform"`
}

// versionOf reads what versionInfo shows from build information.
func versionOf(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{
		Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion,
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				v.Time = &t
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func printVersion(w io.Writer, p printer, v versionInfo) {
	tw := newTable(w)
	row(tw, "simba", v.Version)
	row(tw, "module", dash(v.Module))
	switch {
	case v.Revision == "":
		row(tw, "revision", "unknown (the build did not stamp it: go build -buildvcs=true from a checkout does)")
	default:
		rev := v.Revision
		if v.Time != nil {
			rev += ", " + p.stamp(*v.Time)
		}
		if v.Modified {
			rev += ", with local changes"
		}
		row(tw, "revision", rev)
	}
	row(tw, "go", v.Go)
	row(tw, "platform", v.Platform)
	tw.Flush()
}
