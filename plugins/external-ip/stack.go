package main

import "github.com/vishvananda/netlink/nl"

// growStack grows the goroutine's stack, once and at once, to what the
// netlink library's receive needs: nl.NetlinkSocket.Receive keeps its
// RECEIVE_BUFFER_SIZE buffer in its frame. Otherwise the stack grows by
// doubling as the call deepens (skel, the config's decoding) and then
// jumps to fit that frame, and each new stack is fresh memory: without
// growStack a steered ADD took 22 page faults more and a DEL 18 to 23,
// and each 0.6 to 1.2 ms more end to end (A/B, each 95% interval above 0,
// in slow runs where a fault costs 16 to 50 us; docs/performance.md,
// "Figures behind design choices"). Where faults are cheap it costs the
// zeroing of the frame. TestGrowStackAllocatesNothing keeps the frame on the stack.
//
//go:noinline
func growStack() {
	var frame [nl.RECEIVE_BUFFER_SIZE]byte
	keepFrame(frame[:])
}

// keepFrame keeps the compiler from dropping growStack's frame; it must
// not keep the slice, or the frame would move to the heap.
//
//go:noinline
func keepFrame(b []byte) { _ = b[len(b)-1] }
