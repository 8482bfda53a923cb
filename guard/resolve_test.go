package guard

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// canon is filepath.EvalSymlinks that fails the test on error.
func canon(t *testing.T, p string) string {
	t.Helper()
	c, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask
		t.Fatal(err)
	}
	return path
}

// hostInterp is the host's ELF interpreter for /bin/sh, found without the
// code under test. Tests that need it skip when /bin/sh is static.
func hostInterp(t *testing.T) string {
	t.Helper()
	f, err := elf.Open("/bin/sh")
	if err != nil {
		t.Skipf("no ELF /bin/sh: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return canon(t, strings.TrimRight(string(b), "\x00"))
		}
	}
	t.Skip("/bin/sh is static: no ELF interpreter to find")
	return ""
}

func TestResolveHostCommands(t *testing.T) {
	ld := hostInterp(t)
	sh := canon(t, "/bin/sh")
	env := canon(t, "/usr/bin/env")
	dir := t.TempDir()

	script := writeFile(t, filepath.Join(dir, "script"), []byte("#!/bin/sh -e\necho hi\n"), 0o755)
	envScript := writeFile(t, filepath.Join(dir, "envscript"), []byte("#!/usr/bin/env sh\necho hi\n"), 0o755)
	envSplit := writeFile(t, filepath.Join(dir, "envsplit"), []byte("#!/usr/bin/env -S A=1 sh -e\n"), 0o755)
	nested := writeFile(t, filepath.Join(dir, "nested"), []byte("#!"+script+"\n"), 0o755)
	if err := os.Symlink(sh, filepath.Join(dir, "shlink")); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(dir, "bin")
	os.Mkdir(binDir, 0o755)
	if err := os.Symlink(sh, filepath.Join(binDir, "mysh")); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(dir, "dirlink")
	if err := os.Symlink(binDir, dirLink); err != nil {
		t.Fatal(err)
	}
	realDir := canon(t, dir)

	tests := []struct {
		why       string
		cfg       Config
		wantPath  string
		wantAllow []string
		wantDirs  []string
	}{
		{
			why:       "an absolute path to a dynamic ELF adds its PT_INTERP",
			cfg:       Config{Command: []string{"/bin/sh"}},
			wantPath:  sh,
			wantAllow: []string{sh, ld},
		},
		{
			why:       "a bare name is looked up in PathEnv",
			cfg:       Config{Command: []string{"env", "true"}, PathEnv: "/usr/bin:/bin"},
			wantPath:  env,
			wantAllow: []string{env, ld},
		},
		{
			why:       "relative PATH entries are skipped, later absolute ones used",
			cfg:       Config{Command: []string{"env"}, PathEnv: "bin::.:/usr/bin"},
			wantPath:  env,
			wantAllow: []string{env, ld},
		},
		{
			why:       "a #! script adds its interpreter and the interpreter's PT_INTERP",
			cfg:       Config{Command: []string{script}},
			wantPath:  canon(t, script),
			wantAllow: []string{canon(t, script), sh, ld},
		},
		{
			why:       "#!/usr/bin/env NAME adds env and NAME found in PATH",
			cfg:       Config{Command: []string{envScript}, PathEnv: "/usr/bin:/bin"},
			wantPath:  canon(t, envScript),
			wantAllow: []string{canon(t, envScript), env, sh, ld},
		},
		{
			why:       "env -S: the first word that is neither option nor assignment",
			cfg:       Config{Command: []string{envSplit}, PathEnv: "/usr/bin:/bin"},
			wantPath:  canon(t, envSplit),
			wantAllow: []string{canon(t, envSplit), env, sh, ld},
		},
		{
			why:       "a script run by a script: the whole chain",
			cfg:       Config{Command: []string{nested}},
			wantPath:  canon(t, nested),
			wantAllow: []string{canon(t, nested), canon(t, script), sh, ld},
		},
		{
			why:       "a symlinked command resolves to the real file",
			cfg:       Config{Command: []string{filepath.Join(dir, "shlink")}},
			wantPath:  sh,
			wantAllow: []string{sh, ld},
		},
		{
			why:       "a symlink found through PATH resolves to the real file",
			cfg:       Config{Command: []string{"mysh"}, PathEnv: binDir},
			wantPath:  sh,
			wantAllow: []string{sh, ld},
		},
		{
			why:       "a symlinked ExecAllow directory is canonicalised and listed in Dirs",
			cfg:       Config{Command: []string{"/bin/sh"}, ExecAllow: []string{dirLink + "/"}},
			wantPath:  sh,
			wantAllow: []string{sh, ld, filepath.Join(realDir, "bin")},
			wantDirs:  []string{filepath.Join(realDir, "bin")},
		},
		{
			why:       "an ExecAllow script brings its interpreter chain",
			cfg:       Config{Command: []string{"/bin/sh"}, ExecAllow: []string{script}},
			wantPath:  sh,
			wantAllow: []string{sh, ld, canon(t, script)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			p, err := Resolve(tc.cfg)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if p.Path != tc.wantPath {
				t.Errorf("Path = %q, want %q", p.Path, tc.wantPath)
			}
			want := slices.Clone(tc.wantAllow)
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(p.Allow, want) {
				t.Errorf("Allow = %q, want %q", p.Allow, want)
			}
			if !slices.Equal(p.Interpreters, []string{ld}) {
				t.Errorf("Interpreters = %q, want [%q]", p.Interpreters, ld)
			}
			if !slices.Equal(p.Dirs, tc.wantDirs) {
				t.Errorf("Dirs = %q, want %q", p.Dirs, tc.wantDirs)
			}
			for _, a := range p.Allow {
				if p.Why[a] == "" {
					t.Errorf("no reason for %s", a)
				}
			}
		})
	}
}

func TestResolveHandMadeELF(t *testing.T) {
	dir := canon(t, t.TempDir())
	ld := writeFile(t, filepath.Join(dir, "my-ld.so"), elf64(""), 0o755)
	dyn := writeFile(t, filepath.Join(dir, "dyn"), elf64(ld), 0o755)
	static := writeFile(t, filepath.Join(dir, "static"), elf64(""), 0o755)
	i386 := writeFile(t, filepath.Join(dir, "i386"), ia32Probe(), 0o755)

	tests := []struct {
		why        string
		cmd        string
		wantAllow  []string
		wantInterp []string
	}{
		{"PT_INTERP is read from the program headers", dyn, []string{dyn, ld}, []string{ld}},
		{"a static ELF needs nothing else", static, []string{static}, nil},
		{"a static ELF32 needs nothing else", i386, []string{i386}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			p, err := Resolve(Config{Command: []string{tc.cmd}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Allow, tc.wantAllow) || !slices.Equal(p.Interpreters, tc.wantInterp) {
				t.Errorf("Allow %q Interpreters %q, want %q %q", p.Allow, p.Interpreters, tc.wantAllow, tc.wantInterp)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	dir := t.TempDir()
	plain := writeFile(t, filepath.Join(dir, "plain"), []byte("echo no shebang\n"), 0o755)
	noexec := writeFile(t, filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	relInterp := writeFile(t, filepath.Join(dir, "rel"), []byte("#!sh\n"), 0o755)
	missingInterp := writeFile(t, filepath.Join(dir, "missing"), []byte("#!/nonexistent/sh\n"), 0o755)
	loop := filepath.Join(dir, "loop")
	writeFile(t, loop, []byte("#!"+loop+"\n"), 0o755)
	badELF := writeFile(t, filepath.Join(dir, "badelf"), []byte("\x7fELF garbage"), 0o755)
	missingLD := writeFile(t, filepath.Join(dir, "missingld"), elf64("/nonexistent/ld.so"), 0o755)
	relLD := writeFile(t, filepath.Join(dir, "relld"), elf64("ld.so"), 0o755)
	inCwd := filepath.Join(dir, "cwdbin")
	os.Mkdir(inCwd, 0o755)
	writeFile(t, filepath.Join(inCwd, "only-here"), []byte("#!/bin/sh\n"), 0o755)

	tests := []struct {
		why  string
		cfg  Config
		want error // checked with errors.Is when set
	}{
		{why: "no command", cfg: Config{}, want: ErrNoCommand},
		{why: "empty command name", cfg: Config{Command: []string{""}}, want: ErrNoCommand},
		{why: "not found in PATH", cfg: Config{Command: []string{"no-such-program-nsgate"}, PathEnv: "/usr/bin"}, want: exec.ErrNotFound},
		{why: "found only through a relative PATH entry", cfg: Config{Command: []string{"only-here"}, PathEnv: "cwdbin:."}, want: exec.ErrNotFound},
		{why: "missing file", cfg: Config{Command: []string{filepath.Join(dir, "nope")}}, want: os.ErrNotExist},
		{why: "a directory", cfg: Config{Command: []string{dir}}},
		{why: "no execute bit", cfg: Config{Command: []string{noexec}}},
		{why: "neither ELF nor #!: the kernel would say ENOEXEC", cfg: Config{Command: []string{plain}}},
		{why: "relative #! interpreter", cfg: Config{Command: []string{relInterp}}},
		{why: "missing #! interpreter", cfg: Config{Command: []string{missingInterp}}, want: os.ErrNotExist},
		{why: "a script that is its own interpreter (the kernel says ELOOP)", cfg: Config{Command: []string{loop}}},
		{why: "corrupt ELF", cfg: Config{Command: []string{badELF}}},
		{why: "missing ELF interpreter", cfg: Config{Command: []string{missingLD}}, want: os.ErrNotExist},
		{why: "relative ELF interpreter", cfg: Config{Command: []string{relLD}}},
		{why: "missing ExecAllow entry", cfg: Config{Command: []string{"/bin/sh"}, ExecAllow: []string{"/nonexistent/dir"}}, want: os.ErrNotExist},
		{why: "empty ExecAllow entry", cfg: Config{Command: []string{"/bin/sh"}, ExecAllow: []string{""}}},
		{why: "ExecAllow on a device", cfg: Config{Command: []string{"/bin/sh"}, ExecAllow: []string{"/dev/null"}}},
	}
	t.Chdir(dir)
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			p, err := Resolve(tc.cfg)
			if err == nil {
				t.Fatalf("Resolve succeeded: %+v", p)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "exec guard: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestPlanAllows(t *testing.T) {
	p := Plan{
		Path:  "/usr/bin/x",
		Allow: []string{"/opt/app", "/usr/bin/x", "/usr/lib/ld.so"},
		Dirs:  []string{"/opt/app"},
	}
	tests := []struct {
		why  string
		path string
		want bool
	}{
		{"an allowed file", "/usr/bin/x", true},
		{"the ELF interpreter is in the allowlist", "/usr/lib/ld.so", true},
		{"a file below an allowed directory", "/opt/app/bin/tool", true},
		{"the allowed directory itself", "/opt/app", true},
		{"a sibling with the directory as a name prefix", "/opt/application", false},
		{"a path below an allowed file", "/usr/bin/x/y", false},
		{"unclean path that leaves the directory", "/opt/app/../other", false},
		{"a relative path is never allowed", "opt/app/x", false},
		{"another file", "/usr/bin/sh", false},
	}
	for _, tc := range tests {
		if got := p.Allows(tc.path); got != tc.want {
			t.Errorf("%s: Allows(%q) = %v, want %v", tc.why, tc.path, got, tc.want)
		}
	}
	root := Plan{Path: "/x", Allow: []string{"/"}, Dirs: []string{"/"}}
	if !root.Allows("/any/thing") {
		t.Error(`a "/" allowlist must allow everything`)
	}
}

func TestParseShebang(t *testing.T) {
	long := "#!/" + strings.Repeat("a", 300)
	tests := []struct {
		why       string
		head      string
		interp    string
		arg       string
		wantError bool
	}{
		{why: "plain", head: "#!/bin/sh\necho", interp: "/bin/sh"},
		{why: "one argument", head: "#!/bin/sh -e\n", interp: "/bin/sh", arg: "-e"},
		{why: "blanks around are dropped", head: "#! \t/bin/sh \t -e -x \t\nrest", interp: "/bin/sh", arg: "-e -x"},
		{why: "the rest of the line is one argument", head: "#!/usr/bin/env python3 -u\n", interp: "/usr/bin/env", arg: "python3 -u"},
		{why: "no newline in a short file", head: "#!/bin/sh", interp: "/bin/sh"},
		{why: "NUL ends the interpreter and there is no argument", head: "#!/bin/sh\x00 -e\n", interp: "/bin/sh"},
		{why: "NUL ends the argument", head: "#!/bin/sh -e\x00junk\n", interp: "/bin/sh", arg: "-e"},
		{why: "blanks before a NUL stay in the argument, as in the kernel", head: "#!/bin/sh -e \x00x\n", interp: "/bin/sh", arg: "-e "},
		{why: "CR is part of the name (kernel behaviour)", head: "#!/bin/sh\r\n", interp: "/bin/sh\r"},
		{why: "a long argument is cut at the buffer", head: "#!/bin/sh " + strings.Repeat("b", 300), interp: "/bin/sh", arg: strings.Repeat("b", binprmBufSize-1-len("#!/bin/sh "))},
		{why: "an interpreter name cut by the buffer is refused", head: long, wantError: true},
		{why: "no interpreter", head: "#!\n", wantError: true},
		{why: "only blanks", head: "#!  \t \n", wantError: true},
		{why: "not a script", head: "\x7fELF", wantError: true},
	}
	for _, tc := range tests {
		interp, arg, err := parseShebang([]byte(tc.head))
		if tc.wantError {
			if err == nil || !errors.Is(err, errShebang) {
				t.Errorf("%s: got (%q, %q, %v), want errShebang", tc.why, interp, arg, err)
			}
			continue
		}
		if err != nil || interp != tc.interp || arg != tc.arg {
			t.Errorf("%s: got (%q, %q, %v), want (%q, %q)", tc.why, interp, arg, err, tc.interp, tc.arg)
		}
	}
}

func FuzzParseShebang(f *testing.F) {
	for _, s := range []string{"#!/bin/sh\n", "#!/usr/bin/env -S a=b python3 -u\n", "#!\x00", "#! \t", "#!/x " + strings.Repeat("y", 300)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		interp, arg, err := parseShebang(head)
		if err != nil {
			return
		}
		if interp == "" || strings.ContainsAny(interp, " \t\n\x00") {
			t.Fatalf("bad interpreter %q", interp)
		}
		if strings.ContainsAny(arg, "\n\x00") || strings.HasPrefix(arg, " ") || strings.HasPrefix(arg, "\t") {
			t.Fatalf("bad argument %q", arg)
		}
		if len(interp)+len(arg) > binprmBufSize {
			t.Fatalf("result longer than the kernel's buffer: %d", len(interp)+len(arg))
		}
		_ = envProgram(arg) // must not panic
	})
}

func TestEnvProgram(t *testing.T) {
	tests := []struct{ why, arg, want string }{
		{"bare name", "python3", "python3"},
		{"without -S the argument is one word, so a space means no program", "python3 -u", ""},
		{"an option alone", "-i", ""},
		{"an assignment alone", "A=1", ""},
		{"-S then name", "-S python3 -u", "python3"},
		{"-S glued to the name", "-Spython3 -u", "python3"},
		{"--split-string=", "--split-string=python3 -u", "python3"},
		{"-S skips options and assignments", "-S -i A=1 B=2 node --x", "node"},
		{"-S with nothing", "-S", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		if got := envProgram(tc.arg); got != tc.want {
			t.Errorf("%s: envProgram(%q) = %q, want %q", tc.why, tc.arg, got, tc.want)
		}
	}
}

func TestShellInterpreters(t *testing.T) {
	dir := t.TempDir()
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh:", err)
	}
	wrapper := filepath.Join(dir, "browser")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plan, err := Resolve(Config{Command: []string{wrapper}})
	if err != nil {
		t.Fatal(err)
	}
	got := plan.ShellInterpreters()
	if len(got) != 1 || got[0].Shell != sh || got[0].Script != wrapper {
		t.Errorf("ShellInterpreters() = %+v, want %s for %s (a wrapper script brings in a shell silently)", got, sh, wrapper)
	}
	// A shell the user asked for by name is no surprise.
	plan, err = Resolve(Config{Command: []string{"/bin/sh", "-c", "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.ShellInterpreters(); len(got) != 0 {
		t.Errorf("ShellInterpreters() = %+v for sh as the command, want none", got)
	}
}

// TestElfLoader: the host's dynamic loaders are told by what they are
// (a renamed copy too); programs, a runnable library and a static
// executable are not loaders.
func TestElfLoader(t *testing.T) {
	ldso, err := elfInterp(canon(t, "/bin/sh"))
	if err != nil || ldso == "" {
		t.Skipf("/bin/sh is not dynamically linked here (%v)", err)
	}
	ldso = canon(t, ldso)
	dir := t.TempDir()
	renamed := filepath.Join(dir, "run-elf")
	b, err := os.ReadFile(ldso)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, renamed, b, 0o755)
	static := writeFile(t, filepath.Join(dir, "static"), elf64(""), 0o755)
	cases := []struct {
		path string
		want bool
	}{
		{ldso, true},
		{renamed, true},
		{canon(t, "/bin/sh"), false},
		{static, false},
		{filepath.Join(dir, "missing"), false},
	}
	if libc, _ := filepath.Glob("/usr/lib/*-linux-gnu/libc.so.6"); len(libc) > 0 {
		cases = append(cases, struct {
			path string
			want bool
		}{libc[0], false}) // runnable, but it has a PT_INTERP
	}
	if musl, _ := filepath.Glob("/lib/ld-musl-*.so.1"); len(musl) > 0 {
		cases = append(cases, struct {
			path string
			want bool
		}{canon(t, musl[0]), true}) // libc.so, no SONAME
	}
	for _, tc := range cases {
		if got := elfLoader(tc.path); got != tc.want {
			t.Errorf("elfLoader(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
