module github.com/softnic/softnic

go 1.26.0

require (
	github.com/google/btree v1.1.3
	go.uber.org/zap v1.28.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require go.uber.org/multierr v1.10.0 // indirect
