//go:build !amd64 || purego

package wire

import "hash/crc32"

// updateBulk is crc32.Update(crc, crc32.IEEETable, p), for payloads.
func updateBulk(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }
