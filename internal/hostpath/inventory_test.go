package hostpath

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// openCalls are the calls that open, create or make a path by name. A
// production file that makes one must be listed in hostOpens below, with
// how many it makes and why each may bypass this package.
var openCalls = map[string]bool{
	"os.Open": true, "os.OpenFile": true, "os.Create": true, "os.ReadFile": true, "os.WriteFile": true,
	"os.MkdirAll": true, "os.Mkdir": true, "os.CreateTemp": true, "os.MkdirTemp": true,
	"unix.Open": true, "unix.Openat": true, "unix.Openat2": true, "unix.Creat": true,
	"unix.Mkdirat": true, "unix.Mknod": true, "unix.Mknodat": true,
	"syscall.Open": true, "syscall.Openat": true, "syscall.Creat": true, "syscall.Mkdir": true,
}

// hostOpens is every production file that opens a path by name other than
// through this package, the number of such calls, and why that is safe.
// The paths the worker could steer (the policy, the key, the audit log,
// its head and copy, the pcap, the learned file, credential files,
// tls.upstream_ca, --rw, --ro, --home) go through a Checker and are not
// here; docs/threat-model.md, "nsgate's own host paths".
var hostOpens = map[string]struct {
	n   int
	why string
}{
	"internal/hostpath/hostpath.go":       {2, "this package: the walk itself"},
	"internal/hostpath/hostpath_linux.go": {2, "this package: openat2 and its O_NOFOLLOW fallback"},
	"internal/hostpath/hostpath_other.go": {1, "this package, on systems without openat2"},

	"audit/auditcli/auditcli.go": {1, "audit show|stats: reads the file the caller names, read-only"},
	"audit/read.go":              {1, "audit verify/show/stats: reads a log the caller names, read-only"},
	"audit/show.go":              {1, "audit show --follow: reads a log the caller names, read-only"},
	"audit/verify.go":            {2, "audit verify: reads a log and its head the caller names, read-only"},
	"audit/headfile.go":          {1, "the head file of a log opened without a Checker (tests, audit verify's read)"},
	"audit/headfile_linux.go":    {3, "the head file, written by openat on the log folder's descriptor (O_NOFOLLOW)"},
	"audit/headfile_other.go":    {2, "the head file on systems without openat: O_NOFOLLOW by name"},
	"learn/suggest.go":           {1, "policy suggest: reads the log the caller names, read-only, verified first"},
	"policy/load.go":             {1, "check/explain: read the policy file the caller names, read-only; run goes through a Checker"},

	"bench/density/main.go": {15, "benchmark tool, not part of nsgate's binary"},
	"bench/density/proc.go": {2, "benchmark tool: /proc files"},

	"audit/sink_linux.go":                    {1, "/proc/self/task/TID/stat of nsgate's own writer thread (the stuck-sink verdict), a kernel file"},
	"dns/resolve.go":                         {1, "the host's resolv.conf, a system file"},
	"guard/execaudit_linux.go":               {9, "/proc/PID files of the worker's processes"},
	"guard/resolve.go":                       {1, "reads an --exec-allow program's first bytes (#! line) without running it"},
	"intercept/vault.go":                     {1, "the default reader when no Checker is given (tests); run passes the session's"},
	"intercept/worker.go":                    {1, "the host's CA bundle, a system file, read-only"},
	"internal/diag/hoptrace/hoptrace.go":     {1, "NSGATE_HOPTRACE: a developer hook the caller sets"},
	"internal/diag/pprofenv/pprofenv.go":     {3, "NSGATE_CPUPROFILE/NSGATE_MEMPROFILE/NSGATE_EXECTRACE: developer hooks the caller sets"},
	"internal/diag/starttrace/starttrace.go": {1, "NSGATE_STARTTRACE: a developer hook the caller sets"},
	"pasta/daemon_linux.go":                  {2, "/dev/null; Podman's --pid file, O_NOFOLLOW"},
	"podnet/podnet.go":                       {2, "the audit folder Podman's helper mode names; the host's resolv.conf"},
	"profile/profile.go":                     {2, "/etc/shells and a profile's program's #! line, read-only"},
	"sandbox/confine_linux.go":               {2, "files inside the fresh tmpfs root being built, in the worker's mount namespace"},
	"sandbox/init_linux.go":                  {1, "runs in the worker's namespaces, inside its view"},
	"sandbox/join_linux.go":                  {1, "runs in the worker's namespaces (nsenter-like join)"},
	"sandbox/parent_linux.go":                {1, "/proc/self/status"},
	"sandbox/sandbox.go":                     {1, "/proc/sys files"},
	"sandbox/view.go":                        {1, "a view file nsgate made itself in its private folder"},
	"sandbox/view_linux.go":                  {11, "the view, built in the worker's new mount namespace: fresh tmpfs, /proc, /dev nodes; the CA bundle under the private /tmp when the host has none"},
	"tun/tundev/tundev_linux.go":             {2, "/dev/net/tun and a /proc/sys file"},
	"worker/nssdb.go":                        {3, "a new private temporary folder (MkdirTemp, 0700) for the NSS database"},
	"worker/startgate.go":                    {2, "nsgate's own private runtime folder; O_NOFOLLOW"},

	// The lab runs in its own sealed namespaces; its workers never get its
	// folders writable. Old evidence files are unlinked (never followed)
	// before a run; the audit log in the evidence folder goes through a
	// Checker like any run's.
	"lab/agents_linux.go":                    {6, "lab: its private work folder and its screenshots"},
	"lab/browser_linux.go":                   {1, "lab: the browser's private home in its work folder"},
	"lab/containment_linux.go":               {3, "lab: its private work folder"},
	"lab/hostinfo_linux.go":                  {4, "lab: /proc files and a temporary file in its work folder"},
	"lab/internet/ca.go":                     {1, "lab: the fake internet's CA, in its private work folder"},
	"lab/judge/evidence.go":                  {2, "lab: evidence.json and evidence.md, after the old ones are unlinked"},
	"lab/run_linux.go":                       {11, "lab: the evidence folder, its private work folder, /dev/ptmx"},
	"lab/sessionbus_linux.go":                {2, "lab: private runtime folders in its work folder"},
	"lab/hostpaths_linux.go":                 {12, "lab: the host-path attempts' canary, policies and folders, in its private work folder"},
	"lab/attack/hostpaths.go":                {2, "the attacker: runs as the worker, writes in its --rw folder"},
	"lab/credentials_linux.go":               {4, "lab: the credential attempts' secret, upstream CA and policy, in its private work folder"},
	"lab/attack/credentials.go":              {4, "the attacker: runs as the worker, reads what it may see (the attempt is that it finds no secret)"},
	"lab/attack/attacker.go":                 {1, "the attacker: runs as the worker, inside its view"},
	"lab/attack/attacker_linux.go":           {8, "the attacker: runs as the worker, inside its view"},
	"lab/attack/auditvolume_linux.go":        {2, "the attacker: runs as the worker, inside its view"},
	"lab/attack/browser_agent_linux.go":      {2, "the browser agent: runs as the worker, inside its view"},
	"lab/attack/containment.go":              {10, "the attacker: runs as the worker, inside its view"},
	"lab/attack/containment_attack_linux.go": {16, "the attacker: runs as the worker, inside its view"},
	"lab/attack/socketsweep.go":              {1, "the attacker: runs as the worker, inside its view"},
	"lab/attack/view_attack_linux.go":        {1, "the attacker: runs as the worker, inside its view"},
	"probe/guard_linux.go":                   {6, "test probe: runs as the worker, inside its view"},
}

// TestEveryHostOpenIsChecked walks every production Go file of the module
// and counts the calls that open a path by name. Each file that makes one
// must be listed above with the right count: a new open fails this test
// until it goes through a Checker or is listed with its reason, and an
// entry that no longer matches fails it too.
func TestEveryHostOpenIsChecked(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	found := map[string]int{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "integration", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		ast.Inspect(f, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			s, ok := c.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := s.X.(*ast.Ident); ok && openCalls[id.Name+"."+s.Sel.Name] {
				found[filepath.ToSlash(rel)]++
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 20 {
		t.Fatalf("found opens in only %d files: is the walk looking at the module?", len(found))
	}
	var files []string
	for f := range found {
		files = append(files, f)
	}
	for f := range hostOpens {
		if _, ok := found[f]; !ok {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	for _, f := range files {
		want, listed := hostOpens[f]
		switch {
		case !listed:
			t.Errorf("%s opens %d host path(s) by name: open it through internal/hostpath, or list it in hostOpens with its reason", f, found[f])
		case found[f] != want.n:
			t.Errorf("%s opens %d path(s) by name, hostOpens says %d (%s): check the new one, then update the entry", f, found[f], want.n, want.why)
		}
	}
}
