package guard

import (
	"encoding/json"
	"fmt"

	"github.com/nsgate/nsgate/sandbox"
)

// ApplySandbox is the guard of the sandbox's init (sandbox.InitMain, in
// cmd/nsgate-init and in nsgate's own copy of it): it decodes the Config
// that `nsgate run` wrote, resolves the allowlist inside the worker's
// mount namespace, restricts every thread of init (Landlock, seccomp) and
// installs the exec notifier, whose listener init passes to nsgate.
func ApplySandbox(spec []byte, argv []string) (sandbox.GuardResult, error) {
	var cfg Config
	if err := json.Unmarshal(spec, &cfg); err != nil {
		return sandbox.GuardResult{}, fmt.Errorf("exec guard spec: %w", err)
	}
	cfg.Command = argv
	plan, degraded, listener, err := RestrictSelf(cfg)
	if err != nil {
		return sandbox.GuardResult{}, err
	}
	return sandbox.GuardResult{Path: plan.Path, Degraded: degraded, ExecListener: listener}, nil
}
