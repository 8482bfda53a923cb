// Package internet is the lab's fake internet: counting servers on
// documentation and special addresses put on lo of a sealed namespace, a
// fake upstream DNS server with rebinding and mixed answers, host-side
// unix sockets, and a throwaway CA; with the address plan (plan.go) that
// the attacker, the lab policy and the tests share.
package internet
