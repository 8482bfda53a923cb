// Package attack is the lab's attacker side: the catalogue of every
// bypass attempt (with its category, the layer that must stop it, the
// expected result and the check the lab makes on the host afterwards),
// the attacker that runs them from inside the worker in pure Go (`nsgate
// __attack`), and the browser attempts with their scripted agent and the
// worker that runs Chromium (`nsgate __browserworker`).
package attack
