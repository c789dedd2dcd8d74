// Package mad codes the management datagrams of InfiniBand's connection
// manager (CM MADs, IBTA Volume 1 chapter 12 "Communication management" and
// 13.4 "Management datagrams"): the common MAD header, the CM messages REQ,
// REP, RTU, REJ, MRA, DREQ and DREP, the service ID resolution messages
// SIDR_REQ and SIDR_REP (sidr.go), and rdma_cm's conventions on top of
// them (service IDs from a port space and port, the private-data header
// with the IP addresses). The MADs travel as the 256-byte payload of UD
// SEND packets to and from QP1 (package wire codes those packets).
//
// Messages are typed views over byte slices with accessors, as package
// wire's headers are; [MAD.Decode] validates the header and the attribute
// before it hands one out, and a [MADFields] value encodes one. Decoding,
// encoding and the text forms (AppendSummary, AppendVerbose, and for a whole
// packet AppendPacketSummary and AppendPacketVerbose) do not allocate. The
// tests decode the CM MADs of captures of Linux Soft-RoCE's rping and
// re-encode them byte for byte, and have Wireshark's dissector read what
// softnic encodes.
//
// Package mad does no I/O, keeps no state between messages, and imports
// nothing of softnic but package wire; the connection manager's state
// machine is package nic/cm.
package mad
