package sandbox

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNamespaceError(t *testing.T) {
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
