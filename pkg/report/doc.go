// Package report is what an operator reads of a holder device (`external-ip
// status`, and the node process's repairs metric): the Report's shape, as
// package assigner fills it under its lock, and the kinds of its drift
// lines, the label of external_ip_repairs_total.
//
// The drift lines are prose for a person, worded where the drift is found
// (packages assigner, steer, standing, uplinkroute); Kind reads them in one
// place. It owns no state and touches nothing on the host.
package report
