// Package profile holds nsgate's worker profiles: named bundles of the
// settings a known stack needs under `nsgate run` (the programs it
// executes, unix sockets and namespaces, paths it must see, its
// environment), kept as data in profiles/*.yaml and embedded in the
// binary. `nsgate run --profile NAME` (repeatable) adds them; `nsgate
// profile show NAME` prints one as a policy fragment (docs/agents.md).
//
// A profile never allows a shell: no exec entry may be a shell (by name,
// by /etc/shells, or as a script whose #! interpreter the exec guard would
// add), which the package's tests check for every profile and Apply checks
// again on the host it runs on.
package profile

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nsgate/nsgate/guard"
)

//go:embed profiles/*.yaml
var files embed.FS

// Userns values: when a profile lets the worker create namespaces.
const (
	UsernsNever      = "never"
	UsernsAlways     = "always"
	UsernsUnlessRoot = "unless-root" // not when the worker is uid 0 (Chromium then needs --no-sandbox)
)

// Profile is one profiles/NAME.yaml.
type Profile struct {
	Name    string `yaml:"name"`
	Summary string `yaml:"summary"`
	// Exec are the programs (files, or directories: their trees) the
	// worker may execute, as --exec-allow.
	Exec []string `yaml:"exec"`
	// AllowUnix is --allow-unix.
	AllowUnix bool `yaml:"allow_unix"`
	// Userns is UsernsNever (the default), UsernsAlways or
	// UsernsUnlessRoot: --allow-userns.
	Userns string `yaml:"userns"`
	// ReadOnly are paths the worker must read where the view hides them
	// (below /tmp or $HOME), as --ro. Missing ones are skipped.
	ReadOnly []string `yaml:"ro"`
	// Needs are files the stack reads that must exist on the host (a
	// missing one is an error naming the profile).
	Needs []string `yaml:"needs"`
	// Env are variables added to the worker's environment, unless the
	// caller's environment sets them already.
	Env   map[string]string `yaml:"env"`
	Notes string            `yaml:"notes"`
}

// All returns every profile, sorted by name.
func All() ([]Profile, error) {
	ents, err := fs.ReadDir(files, "profiles")
	if err != nil {
		return nil, err
	}
	var out []Profile
	for _, e := range ents {
		b, err := files.ReadFile("profiles/" + e.Name())
		if err != nil {
			return nil, err
		}
		p, err := parse(b)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", e.Name(), err)
		}
		if p.Name+".yaml" != e.Name() {
			return nil, fmt.Errorf("profile %s: name %q does not match the file", e.Name(), p.Name)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parse reads one profile, strictly (unknown keys are errors).
func parse(b []byte) (Profile, error) {
	var p Profile
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(&p); err != nil {
		return Profile{}, err
	}
	switch p.Userns {
	case "":
		p.Userns = UsernsNever
	case UsernsNever, UsernsAlways, UsernsUnlessRoot:
	default:
		return Profile{}, fmt.Errorf("userns %q: want %s, %s or %s", p.Userns, UsernsNever, UsernsAlways, UsernsUnlessRoot)
	}
	if p.Name == "" || len(p.Exec) == 0 {
		return Profile{}, errors.New("a profile needs a name and exec entries")
	}
	for _, e := range slices.Concat(p.Exec, p.ReadOnly, p.Needs) {
		if !filepath.IsAbs(e) {
			return Profile{}, fmt.Errorf("%s: paths must be absolute", e)
		}
	}
	for _, e := range p.Exec {
		if IsShell(e) {
			return Profile{}, fmt.Errorf("exec %s: a profile never allows a shell", e)
		}
	}
	for k := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return Profile{}, fmt.Errorf("env %q: not a variable name", k)
		}
	}
	return p, nil
}

// Get returns the profile called name.
func Get(name string) (Profile, error) {
	all, err := All()
	if err != nil {
		return Profile{}, err
	}
	var names []string
	for _, p := range all {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("no profile %q (profiles: %s)", name, strings.Join(names, ", "))
}

// Settings are what the profiles of one run add to its flags.
type Settings struct {
	ExecAllow, ReadOnly    []string
	AllowUnix, AllowUserns bool
	// Env are NAME=VALUE entries (sorted), for Environ.
	Env []string
}

// Apply gathers the settings of the named profiles for a worker that runs
// as uid 0 or not (root), checking them against this host: every exec
// entry and need must exist, and none may be a shell or a script (whose
// #! interpreter the exec guard would add).
func Apply(names []string, root bool) (Settings, error) {
	var s Settings
	env := map[string]string{}
	for _, n := range names {
		p, err := Get(n)
		if err != nil {
			return Settings{}, err
		}
		for _, e := range p.Exec {
			if err := checkExec(e); err != nil {
				return Settings{}, fmt.Errorf("profile %s: %w", n, err)
			}
		}
		for _, e := range p.Needs {
			if _, err := os.Stat(e); err != nil {
				return Settings{}, fmt.Errorf("profile %s needs %s: %w", n, e, err)
			}
		}
		for _, r := range p.ReadOnly {
			if _, err := os.Stat(r); err == nil {
				s.ReadOnly = append(s.ReadOnly, r)
			}
		}
		s.ExecAllow = append(s.ExecAllow, p.Exec...)
		s.AllowUnix = s.AllowUnix || p.AllowUnix
		s.AllowUserns = s.AllowUserns || p.Userns == UsernsAlways || p.Userns == UsernsUnlessRoot && !root
		for k, v := range p.Env {
			if old, ok := env[k]; ok && old != v {
				return Settings{}, fmt.Errorf("profile %s: %s=%s, but another profile sets %s=%s", n, k, v, k, old)
			}
			env[k] = v
		}
	}
	s.ExecAllow, s.ReadOnly = uniq(s.ExecAllow), uniq(s.ReadOnly)
	for k, v := range env {
		s.Env = append(s.Env, k+"="+v)
	}
	sort.Strings(s.Env)
	return s, nil
}

// Environ returns base (NAME=VALUE entries) with s.Env added, where base
// does not set a variable already: the caller's environment wins.
func (s Settings) Environ(base []string) []string {
	out := slices.Clone(base)
	have := map[string]bool{}
	for _, e := range base {
		k, _, _ := strings.Cut(e, "=")
		have[k] = true
	}
	for _, e := range s.Env {
		if k, _, _ := strings.Cut(e, "="); !have[k] {
			out = append(out, e)
		}
	}
	return out
}

// checkExec checks one exec entry on this host: it exists, and neither it
// nor the file it links to is a shell or a #! script.
func checkExec(e string) error {
	c, err := filepath.EvalSymlinks(e)
	if err != nil {
		return fmt.Errorf("%s: %w (is its package installed?)", e, err)
	}
	if IsShell(c) {
		return fmt.Errorf("%s is the shell %s: a profile never allows a shell", e, c)
	}
	st, err := os.Stat(c)
	if err != nil || st.IsDir() {
		return err
	}
	f, err := os.Open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 2)
	if n, _ := f.Read(head); n == 2 && string(head) == "#!" {
		return fmt.Errorf("%s is a script: its #! interpreter would join the exec allowlist; a profile lists programs only", e)
	}
	return nil
}

// IsShell reports whether path names a shell: by base name (guard's list:
// sh, bash, dash, zsh, busybox...) or as a line of /etc/shells (which
// also names rbash, tmux and the like).
func IsShell(path string) bool {
	if guard.IsShellName(filepath.Base(path)) {
		return true
	}
	b, err := os.ReadFile("/etc/shells")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && (l == path || filepath.Base(l) == filepath.Base(path)) {
			return true
		}
	}
	return false
}

func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
