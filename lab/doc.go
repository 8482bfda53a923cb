// Package lab runs nsgate's security lab (`nsgate lab`): Run builds the
// fake internet in a sealed namespace, runs the attacker under `nsgate
// run` with the lab policy, judges every attempt and writes the evidence.
//
// It only ties its four parts together:
//
//   - lab/sealed: re-execute the program in a network namespace of its
//     own that holds nothing but lo, and check that it does.
//   - lab/internet: the fake internet on lo of that namespace (counting
//     servers, a fake upstream DNS, host-side unix sockets, a throwaway
//     CA) and its address plan.
//   - lab/attack: the catalogue of attempts, the attacker that runs them
//     inside the worker (`nsgate __attack`), the host checks of the
//     containment attempts, and the browser attempts with their scripted
//     agent and worker (`nsgate __browserworker`).
//   - lab/judge: correlate what the attacker saw, what each fake target
//     received and the audit records into verdicts and evidence.
//
// Besides the main run, Run makes the phases that need a run of their
// own: the containment attempt audit-fill-volume, whose audit log lies on
// a small tmpfs the lab mounts in a mount namespace of its own, and, with
// --browser, headless Chromium as the worker of a second `nsgate run`
// driven over CDP; and the credential attempts, in a run of their own
// that terminates TLS for two fake upstreams of the lab's and brokers a
// secret only the lab knows (credentials_linux.go). The lab policy (policy.yaml) and the layers --break
// can disable live here.
package lab
