//go:build !linux

package main

// Off Linux a child runs softnic commands only: the tests that lower its
// limits, run it as another user or use its modes are Linux's.

var childModes map[string]func(args []string) int

func prepareChild() int { return 0 }

func removeSharedExe() {}
