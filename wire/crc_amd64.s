//go:build !purego

#include "textflag.h"

// Fold constants of the bit-reflected IEEE CRC-32 for moving a 128-bit lane
// D bits further into the message: the low quadword is multiplied by
// x^(D+32) mod P, the high one by x^(D-32) mod P, each bit-reflected and
// shifted left by one (the scheme of Intel's "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ", 2009, whose 512- and 128-bit
// constants hash/crc32 uses as well; the others are computed the same way).
// foldk holds them for D = 1024, 768, 512, 256 and 128, 16 bytes each.
DATA foldk<>+0x00(SB)/8, $0x1e88ef372
DATA foldk<>+0x08(SB)/8, $0x14a7fe880
DATA foldk<>+0x10(SB)/8, $0x0df068dc2
DATA foldk<>+0x18(SB)/8, $0x18cb44e58
DATA foldk<>+0x20(SB)/8, $0x154442bd4
DATA foldk<>+0x28(SB)/8, $0x1c6e41596
DATA foldk<>+0x30(SB)/8, $0x0f1da05aa
DATA foldk<>+0x38(SB)/8, $0x15a546366
DATA foldk<>+0x40(SB)/8, $0x1751997d0
DATA foldk<>+0x48(SB)/8, $0x0ccaa009e
GLOBL foldk<>(SB), RODATA, $80

// STEP folds lane register R 128 bytes forward onto the next 128 bytes at
// OFF(SI); the constants are in Y5.
#define STEP(R, OFF) \
	VPCLMULQDQ $0x00, Y5, R, Y6; \
	VPCLMULQDQ $0x11, Y5, R, R;  \
	VPXOR      Y6, R, R;         \
	VPXOR      OFF(SI), R, R

// INTO folds R, which lies K's distance before Y3, into Y3.
#define INTO(K, R) \
	VBROADCASTI128 K, Y5;        \
	VPCLMULQDQ     $0x00, Y5, R, Y6; \
	VPCLMULQDQ     $0x11, Y5, R, Y7; \
	VPXOR          Y6, Y3, Y3;   \
	VPXOR          Y7, Y3, Y3

// func foldIEEE(reg uint32, p []byte, out *[16]byte)
// len(p) is a multiple of 128 and at least 128. Four YMM registers carry
// 128 bytes of the message, eight 128-bit lanes, folded forward 128 bytes
// at a time; at the end they are folded into the last lane, which goes to
// out.
TEXT ·foldIEEE(SB), NOSPLIT, $0-40
	MOVL reg+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ out+32(FP), DI

	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVD   AX, X4
	VPXOR   Y4, Y0, Y0 // the register into the first four bytes
	ADDQ    $128, SI
	SUBQ    $128, CX
	VBROADCASTI128 foldk<>+0x00(SB), Y5

loop:
	CMPQ CX, $128
	JB   fold
	STEP(Y0, 0)
	STEP(Y1, 32)
	STEP(Y2, 64)
	STEP(Y3, 96)
	ADDQ $128, SI
	SUBQ $128, CX
	JMP  loop

fold:
	// Y0, Y1 and Y2 lie 96, 64 and 32 bytes before Y3.
	INTO(foldk<>+0x10(SB), Y0)
	INTO(foldk<>+0x20(SB), Y1)
	INTO(foldk<>+0x30(SB), Y2)

	// Y3's low lane lies 16 bytes before its high lane.
	VEXTRACTI128 $1, Y3, X4
	VMOVDQU      foldk<>+0x40(SB), X5
	VPCLMULQDQ   $0x00, X5, X3, X6
	VPCLMULQDQ   $0x11, X5, X3, X7
	VPXOR        X6, X4, X4
	VPXOR        X7, X4, X4
	VMOVDQU      X4, 0(DI)
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
