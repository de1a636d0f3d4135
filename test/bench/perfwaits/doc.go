// Package perfwaits reads `perf script` output of the scheduler's switch
// and wakeup events (with kernel stacks) and of the workqueue's, and tells
// where profiled processes waited off the CPU: per row, by the kernel
// functions they waited in, how often, how long and who woke them; and how
// long the nf_tables destroy work took from its queueing to its end. It is
// the analysis of the bench's -waits profile; it runs nothing and touches
// nothing: the bench records the events and names each process's row.
package perfwaits
