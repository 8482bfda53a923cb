// Package sealed re-executes a program in a network namespace of its own
// that holds nothing but lo (with a user namespace when unprivileged),
// and checks that it does: nothing the lab or a test sends there can
// leave the machine.
package sealed
