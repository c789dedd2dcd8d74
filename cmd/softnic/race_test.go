//go:build race

package main

// raceEnabled is set when the race detector runs, which makes the attack
// tests' daemons several times slower: they attack lower limits.
const raceEnabled = true
