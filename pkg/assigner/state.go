package assigner

import "github.com/external-ip/external-ip/pkg/store"

// The store's types under the names the assigner's code has always used:
// the store owns their format on disk, the assigner what they mean.
type (
	// Attachment names one attachment of a container to a network.
	Attachment  = store.Attachment
	record      = store.Record
	ipEntry     = store.IPEntry
	journal     = store.Journal
	journalStep = store.Step
	heldAs      = store.HeldAs
	steering    = store.Steering
	egressRule  = store.EgressRule
	hairpinRule = store.HairpinRule
)
