// Package tests holds softnic's end-to-end tests and benchmarks: devices
// on real loopback UDP sockets, with the fault injector between them, and
// the raw-UDP baselines the benchmarks are measured against.
package tests
