// Package lab is nsgate's security lab and the test bench it shares with the
// integration tests.
//
// It has four parts:
//
//   - Sealing (EnterSealed, Sealed, CheckSealed): re-execute the current
//     program in a fresh network namespace of its own (a user namespace too
//     when unprivileged) and refuse to go on unless that namespace holds
//     nothing but lo. Nothing the lab or a test sends can leave the machine.
//   - The fake internet (Layout, Internet, FakeDNS, CA): counting servers on
//     documentation and special addresses added to lo of the sealed
//     namespace, a fake upstream DNS server with rebinding and mixed
//     answers, a host-side unix socket, and a throwaway CA whose certificate
//     a worker can trust through a file.
//   - The catalogue and the attacker (Catalogue, Attack): every bypass
//     attempt the lab makes, with its category, the layer that must stop it
//     and the expected result; the attacker runs them in order from inside
//     the worker, in pure Go, and reports one Observation per attempt.
//   - Judging and evidence (Judge, Evidence): correlate what the attacker
//     saw, what each fake target received and the audit records, decide
//     each attempt's verdict and the lab's, and write the evidence record.
//
// The containment attempts (containment.go) test the worker's file system
// view and the audit log's own defences. Most are refused by the kernel
// inside the worker and leave no audit record by design: the lab checks
// the host after the run instead (HostCheck: a file unchanged, absent or
// present, the audit log intact), and Judge counts the check. One of them
// (audit-fill-volume) runs in an `nsgate run` of its own whose audit log
// lies on a small tmpfs that the lab mounts in a mount namespace of its
// own.
//
// With --browser (browser.go, browser_linux.go), Run also starts headless
// Chromium as the worker of a second `nsgate run` (BrowserWorker relays its
// DevTools port to the published one) and a scripted agent drives it over
// CDP through the browser attempts (BrowserAttempts).
//
// Run (Linux) ties them together for `nsgate lab`. The addresses, names and
// ports of the fake internet are exported constants so that tests, the
// attacker and the lab policy agree on one plan.
package lab
