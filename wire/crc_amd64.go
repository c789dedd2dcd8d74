//go:build !purego

package wire

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// foldAVX2 is set when the CPU carries-less multiplies 256-bit registers
// (AVX2 with VPCLMULQDQ): then updateBulk folds 128 bytes a step, twice
// what hash/crc32 folds with PCLMULQDQ on 128-bit registers (its 256-bit
// path needs AVX-512, which machines with AVX2 and VPCLMULQDQ, AMD's
// Zen 3 among them, lack).
var foldAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && hasVPCLMULQDQ()

// hasVPCLMULQDQ reports CPUID leaf 7's VPCLMULQDQ bit (ECX bit 10), which
// golang.org/x/sys/cpu reports only with AVX-512.
func hasVPCLMULQDQ() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// foldMin is the shortest input updateBulk folds itself: below it
// hash/crc32's setup-free path is as fast.
const foldMin = 512

// updateBulk is crc32.Update(crc, crc32.IEEETable, p), for payloads.
func updateBulk(crc uint32, p []byte) uint32 {
	if !foldAVX2 || len(p) < foldMin {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	n := len(p) &^ 127
	var rest [16]byte
	foldIEEE(^crc, p[:n], &rest)
	// rest followed by p[n:] has, from a zero register, the CRC that p
	// has from crc's.
	crc = updateIEEE(0xFFFFFFFF, rest[:])
	return crc32.Update(crc, crc32.IEEETable, p[n:])
}

// foldIEEE folds p, whose length is a multiple of 128 and at least 128,
// into the 16 bytes out, which have from a zero register the raw CRC
// register (not inverted) that p has from reg.
//
//go:noescape
func foldIEEE(reg uint32, p []byte, out *[16]byte)

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
