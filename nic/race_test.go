//go:build race

package nic_test

// raceEnabled is set when the race detector runs: sync.Pool then drops a
// share of what is put back on purpose, so pooled packet batches allocate.
const raceEnabled = true
