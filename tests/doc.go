// Package tests holds softnic's end-to-end tests and benchmarks: devices
// on real loopback UDP sockets, with the fault injector between them, and
// beside the benchmarks the raw-UDP baselines they are measured against
// (package udptest's).
package tests
