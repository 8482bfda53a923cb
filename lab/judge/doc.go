// Package judge decides the lab's verdicts: it correlates what the
// attacker saw, what each fake target received and the audit records,
// decides each attempt's verdict and the lab's, and writes the evidence.
package judge
