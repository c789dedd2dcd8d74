//go:build race

package mr

// raceEnabled is set when the race detector runs: sync.Pool then drops a
// share of what is put back on purpose, so pooled searches allocate.
const raceEnabled = true
