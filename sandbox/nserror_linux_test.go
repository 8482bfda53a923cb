package sandbox

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNamespaceError(t *testing.T) {
	defer func(f func() bool) { underSeccompFilter = f }(underSeccompFilter)
	underSeccompFilter = func() bool { return false }
	cases := []struct {
		err  error
		want string // "" means not a known refusal
		why  string
	}{
		{unix.EPERM, "kernel.unprivileged_userns_clone=1", "EPERM: user namespaces disabled for unprivileged users"},
		{unix.EACCES, "kernel.apparmor_restrict_unprivileged_userns=0", "EACCES: AppArmor's restriction"},
		{unix.ENOSPC, "user.max_user_namespaces", "ENOSPC: the namespace limit"},
		{unix.EINVAL, "lacks user, network, PID or mount namespaces", "EINVAL: a kernel without them"},
		{unix.ENOMEM, "", "another error is not explained as a namespace refusal"},
	}
	for _, tc := range cases {
		got := NamespaceError("cannot create things", tc.err)
		if tc.want == "" {
			if got != nil {
				t.Errorf("%s: %v, want nil", tc.why, got)
			}
			continue
		}
		if got == nil || !strings.HasPrefix(got.Error(), "cannot create things: ") || !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("%s: %v, want it to name what, wrap the errno and say %q", tc.why, got, tc.want)
		}
	}
}

// Under a seccomp filter (a container's profile), EPERM names the filter
// and Docker's option first; EACCES still points at AppArmor.
func TestNamespaceErrorUnderSeccomp(t *testing.T) {
	defer func(f func() bool) { underSeccompFilter = f }(underSeccompFilter)
	underSeccompFilter = func() bool { return true }
	got := NamespaceError("cannot create things", unix.EPERM)
	if got == nil || !strings.Contains(got.Error(), "seccomp=unconfined") || !errors.Is(got, unix.EPERM) {
		t.Errorf("EPERM under a seccomp filter: %v, want it to name --security-opt seccomp=unconfined", got)
	}
	got = NamespaceError("cannot create things", unix.EACCES)
	if got == nil || strings.Contains(got.Error(), "seccomp") || !strings.Contains(got.Error(), "apparmor") {
		t.Errorf("EACCES under a seccomp filter: %v, want the AppArmor hint only", got)
	}
}
