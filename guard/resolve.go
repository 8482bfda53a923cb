package guard

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const (
	// binprmBufSize is how much of a file the kernel reads to pick a
	// binary format (BINPRM_BUF_SIZE); a #! line must fit in it.
	binprmBufSize = 256
	// maxInterpDepth bounds #! chains as the kernel does (exec_binprm
	// gives up after five rewrites with ELOOP).
	maxInterpDepth = 5
)

// Resolve works out what the worker may execute. It reads the file system
// (PATH lookup, symlinks, ELF program headers, #! lines) and changes
// nothing, so it may run in any process; its result is only valid in the
// same mount namespace. It fails when Command[0] cannot be found or is not
// an executable ELF file or #! script, when an interpreter it names is
// missing, or when an ExecAllow entry does not exist or is neither a
// regular file nor a directory.
//
// The allowlist is: Command[0] (canonical path), its ELF interpreter
// (PT_INTERP); for a #! script, the interpreter chain (each interpreter and,
// if it is an ELF file, its PT_INTERP), and for "#!/usr/bin/env NAME" (or
// "env -S NAME ...") also NAME looked up in PathEnv, when found; then each
// ExecAllow entry, and for a file among them, its interpreters the same
// way. Symlinks are resolved, so the list names real files.
func Resolve(cfg Config) (Plan, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return Plan{}, ErrNoCommand
	}
	r := &resolver{
		pathEnv: cfg.PathEnv,
		why:     make(map[string]string),
		dirs:    make(map[string]bool),
		interps: make(map[string]bool),
	}
	if r.pathEnv == "" {
		r.pathEnv = os.Getenv("PATH")
	}
	found, err := r.lookPath(cfg.Command[0])
	if err != nil {
		return Plan{}, fmt.Errorf("exec guard: command %q: %w", cfg.Command[0], err)
	}
	path, err := r.executable(found, "the command", 0, true)
	if err != nil {
		return Plan{}, fmt.Errorf("exec guard: command %q: %w", cfg.Command[0], err)
	}
	for _, a := range cfg.ExecAllow {
		if err := r.allowEntry(a); err != nil {
			return Plan{}, fmt.Errorf("exec guard: exec allow %q: %w", a, err)
		}
	}
	return r.plan(path), nil
}

type resolver struct {
	pathEnv string
	why     map[string]string // canonical path -> reason; the allowlist
	dirs    map[string]bool
	interps map[string]bool
}

func (r *resolver) add(path, why string) {
	if _, ok := r.why[path]; !ok {
		r.why[path] = why
	}
}

func (r *resolver) plan(path string) Plan {
	p := Plan{Path: path, Why: r.why}
	for a := range r.why {
		p.Allow = append(p.Allow, a)
	}
	for d := range r.dirs {
		p.Dirs = append(p.Dirs, d)
	}
	for i := range r.interps {
		p.Interpreters = append(p.Interpreters, i)
	}
	sort.Strings(p.Allow)
	sort.Strings(p.Dirs)
	sort.Strings(p.Interpreters)
	return p
}

// lookPath finds name like execvp(3) would, except that relative PATH
// entries are skipped. A name with a slash is taken as a path (relative to
// the working directory).
func (r *resolver) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return filepath.Abs(name)
	}
	for _, dir := range filepath.SplitList(r.pathEnv) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// canonical returns the absolute, symlink-free form of path and its mode.
func canonical(path string) (string, os.FileMode, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", 0, err
	}
	c, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", 0, err
	}
	fi, err := os.Stat(c)
	if err != nil {
		return "", 0, err
	}
	return c, fi.Mode(), nil
}

// allowEntry adds one ExecAllow entry.
func (r *resolver) allowEntry(entry string) error {
	if entry == "" {
		return errors.New("empty path")
	}
	c, mode, err := canonical(entry)
	if err != nil {
		return err
	}
	switch {
	case mode.IsDir():
		r.add(c, "allowed directory "+entry)
		r.dirs[c] = true
		return nil
	case mode.IsRegular():
		_, err := r.executable(c, "allowed file "+entry, 0, false)
		return err
	}
	return fmt.Errorf("%s is neither a regular file nor a directory", c)
}

// executable adds the file at path and what the kernel will need to run
// it. strict requires an execute bit and a format the kernel runs without
// binfmt_misc (ELF or #!). It returns the canonical path.
func (r *resolver) executable(path, why string, depth int, strict bool) (string, error) {
	if depth > maxInterpDepth {
		return "", fmt.Errorf("%s: more than %d levels of #! interpreters", path, maxInterpDepth)
	}
	c, mode, err := canonical(path)
	if err != nil {
		return "", err
	}
	if !mode.IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", c)
	}
	if strict && mode.Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable (mode %v)", c, mode.Perm())
	}
	r.add(c, why)

	head, err := readHead(c)
	if err != nil {
		return "", err
	}
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		interp, arg, err := parseShebang(head)
		if err != nil {
			return "", fmt.Errorf("%s: %w", c, err)
		}
		if !filepath.IsAbs(interp) {
			return "", fmt.Errorf("%s: #! interpreter %q is not an absolute path", c, interp)
		}
		ic, err := r.executable(interp, "#! interpreter of "+c, depth+1, true)
		if err != nil {
			return "", fmt.Errorf("%s: #! interpreter: %w", c, err)
		}
		if filepath.Base(ic) == "env" {
			if prog := envProgram(arg); prog != "" {
				// Best effort: a script whose program is not found
				// fails by itself; nothing needs allowing then.
				if p, err := r.lookPath(prog); err == nil {
					if _, err := r.executable(p, "program that "+c+" runs through env", depth+1, true); err != nil {
						return "", fmt.Errorf("%s: env program %q: %w", c, prog, err)
					}
				}
			}
		}
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		interp, err := elfInterp(c)
		if err != nil {
			return "", err
		}
		if interp == "" {
			break // static
		}
		if !filepath.IsAbs(interp) {
			return "", fmt.Errorf("%s: ELF interpreter %q is not an absolute path", c, interp)
		}
		ic, imode, err := canonical(interp)
		if err != nil {
			return "", fmt.Errorf("%s: ELF interpreter: %w", c, err)
		}
		if !imode.IsRegular() {
			return "", fmt.Errorf("%s: ELF interpreter %s is not a regular file", c, ic)
		}
		// The kernel does not follow an interpreter's own PT_INTERP.
		r.add(ic, "ELF interpreter of "+c)
		r.interps[ic] = true
	default:
		if strict {
			return "", fmt.Errorf("%s is neither an ELF executable nor a #! script", c)
		}
	}
	return c, nil
}

// readHead returns the first binprmBufSize bytes of the file.
func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, binprmBufSize)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf[:n], nil
}

// elfInterp returns the PT_INTERP path of an ELF file, "" if it has none.
func elfInterp(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		if p.Filesz == 0 || p.Filesz > 4096 { // PATH_MAX
			return "", fmt.Errorf("%s: bad PT_INTERP size %d", path, p.Filesz)
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), int64(p.Filesz)))
		if err != nil {
			return "", fmt.Errorf("%s: read PT_INTERP: %w", path, err)
		}
		// The kernel requires the NUL terminator and stops at it.
		i := bytes.IndexByte(b, 0)
		if i <= 0 {
			return "", fmt.Errorf("%s: malformed PT_INTERP", path)
		}
		return string(b[:i]), nil
	}
	return "", nil
}

// elfLoader reports whether the ELF file at path is a dynamic loader,
// whatever its name: a shared object (ET_DYN) with an entry point and no
// PT_INTERP of its own that is named like one in its DT_SONAME (glibc's
// ld.so keeps ld-linux-x86-64.so.2 there whatever its file is called) or
// defines __tls_get_addr, which a dynamic linker provides to the programs
// it loads (glibc's ld.so; musl's loader is its libc.so, which has no
// SONAME and which /lib/ld-musl-ARCH.so.1 links to). A static-pie program
// defines no such symbol, and a library that can also be run, such as
// glibc's libc.so.6, has a PT_INTERP. A file it cannot parse is not one.
func elfLoader(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Type != elf.ET_DYN || f.Entry == 0 {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	if names, err := f.DynString(elf.DT_SONAME); err == nil {
		for _, n := range names {
			if looksLikeELFInterpreter(n) {
				return true
			}
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return false
	}
	for _, sym := range syms {
		if sym.Name == "__tls_get_addr" && sym.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}

// errShebang is wrapped by parseShebang's errors.
var errShebang = errors.New("bad #! line")

// parseShebang parses a #! line the way the kernel does (binfmt_script).
// head holds the first bytes of the file; like the kernel, it looks at
// binprmBufSize bytes, zero-padded when the file is shorter. The line ends
// at the first newline, or, without one, one byte before the end of the
// buffer, provided the interpreter's name ends before that (else the
// kernel refuses the file). Trailing blanks are trimmed. The interpreter
// is the first word (words end at a space, tab or NUL); the argument, if
// the word ended with a blank, is the rest of the line without leading
// blanks, up to a NUL, passed to the interpreter as one word.
func parseShebang(head []byte) (interp, arg string, err error) {
	if !bytes.HasPrefix(head, []byte("#!")) {
		return "", "", fmt.Errorf("%w: no #!", errShebang)
	}
	var buf [binprmBufSize]byte
	copy(buf[:], head)
	blank := func(c byte) bool { return c == ' ' || c == '\t' }
	term := func(c byte) bool { return blank(c) || c == 0 }
	skipBlanks := func(b []byte) int {
		i := 0
		for i < len(b) && blank(b[i]) {
			i++
		}
		return i
	}

	var line []byte
	if nl := bytes.IndexByte(buf[:], '\n'); nl >= 0 {
		line = buf[2:nl]
	} else {
		line = buf[2 : binprmBufSize-1]
		i := skipBlanks(line)
		if i == len(line) {
			return "", "", fmt.Errorf("%w: no interpreter", errShebang)
		}
		if bytes.IndexFunc(line[i:], func(r rune) bool { return r == ' ' || r == '\t' || r == 0 }) < 0 {
			return "", "", fmt.Errorf("%w: interpreter name longer than the %d-byte buffer", errShebang, binprmBufSize)
		}
	}
	line = bytes.TrimRight(line, " \t")

	i := skipBlanks(line)
	j := i
	for j < len(line) && !term(line[j]) {
		j++
	}
	if i == j {
		return "", "", fmt.Errorf("%w: no interpreter", errShebang)
	}
	interp = string(line[i:j])
	if j == len(line) || line[j] == 0 {
		return interp, "", nil
	}
	rest := line[j:]
	rest = rest[skipBlanks(rest):]
	if k := bytes.IndexByte(rest, 0); k >= 0 {
		rest = rest[:k]
	}
	return interp, string(rest), nil
}

// envProgram returns the program that "#!/usr/bin/env ARG" runs, or ""
// when it cannot tell. Without -S, env gets ARG as one word, so ARG must
// be a bare name; with -S (split string) the first word that is neither an
// option nor a NAME=VALUE assignment is taken.
func envProgram(arg string) string {
	words := strings.Fields(arg)
	if len(words) == 0 {
		return ""
	}
	switch {
	case words[0] == "-S" || words[0] == "--split-string":
		words = words[1:]
	case strings.HasPrefix(words[0], "--split-string="):
		words[0] = strings.TrimPrefix(words[0], "--split-string=")
	case strings.HasPrefix(words[0], "-S"):
		words[0] = words[0][2:]
	default:
		if len(words) != 1 || strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") {
			return ""
		}
		return arg
	}
	for _, w := range words {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		return w
	}
	return ""
}
