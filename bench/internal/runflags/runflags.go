// Package runflags handles the command-line flags the benchmark commands
// share: -only, -parts and -cpuprofile.
package runflags

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
)

// Only compiles the -only regexp expr of command prog; nil if expr is
// empty. On a bad regexp it prints "prog: -only: ..." and exits with 2.
func Only(prog, expr string) *regexp.Regexp {
	if expr == "" {
		return nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: -only: %v\n", prog, err)
		os.Exit(2)
	}
	return re
}

// Selected reports whether the -only regexp re (nil: everything) lets name
// run.
func Selected(re *regexp.Regexp, name string) bool { return re == nil || re.MatchString(name) }

// Parts returns the set of names in the comma-separated -parts list s,
// or an error naming one that is not among known: a misspelt part would
// otherwise run nothing and say nothing.
func Parts(s string, known ...string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(known, p) {
			return nil, fmt.Errorf("-parts: unknown part %q (parts: %s)", p, strings.Join(known, ", "))
		}
		want[p] = true
	}
	return want, nil
}

// Part is one part of a command's run, named in -parts.
type Part[E any] struct {
	// Name is the part's name in -parts.
	Name string
	// Run runs the part with the command's environment.
	Run func(ctx context.Context, e E) error
}

// RunParts runs, in order, the parts whose names the -parts list s holds,
// each with e. It stops at the first error, which it returns prefixed with
// the part's name.
func RunParts[E any](ctx context.Context, s string, e E, parts []Part[E]) error {
	known := make([]string, len(parts))
	for i, p := range parts {
		known[i] = p.Name
	}
	want, err := Parts(s, known...)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if want[p.Name] {
			if err := p.Run(ctx, e); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// StartCPUProfile writes a CPU profile of this process to path (-cpuprofile)
// until the returned stop is called. With an empty path it does nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
