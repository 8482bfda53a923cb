package worker

import (
	"fmt"
	"os"

	"github.com/nsgate/nsgate/internal/hostpath"
)

// hostPaths returns the run's path checker: the worker may write its --rw
// trees and --home (the policy's filesystem.write is added once the view
// is planned). The trees themselves, and --ro, are resolved once too, so
// that a link another user owns on their way is refused before anything
// is mounted.
func (r *run) hostPaths() (*hostpath.Checker, error) {
	cfg := &r.cfg
	for _, g := range []struct {
		flag  string
		paths []string
	}{{"--rw", cfg.Writable}, {"--ro", cfg.ReadOnly}, {"--home", []string{cfg.HomeDir}}} {
		for _, p := range g.paths {
			if p == "" {
				continue
			}
			hp, err := hostpath.Default().Resolve(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.flag, err)
			}
			hp.Close()
		}
	}
	return hostpath.New(append(append([]string(nil), cfg.Writable...), cfg.HomeDir)...)
}

// openOutput opens an output of the run (the pcap) as hostpath decides:
// created with O_EXCL|O_NOFOLLOW, or, when it was there, the same regular
// file of the caller's, opened with O_NOFOLLOW.
func openOutput(paths *hostpath.Checker, path string, flag int, perm os.FileMode) (*os.File, error) {
	hp, err := paths.ResolveOutput(path)
	if err != nil {
		return nil, err
	}
	defer hp.Close()
	return hp.OpenOutput(flag, perm, hostpath.Regular)
}
