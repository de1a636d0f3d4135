package nat

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// destroying says, as the kernel's commit does, whether a message leaves
// objects for the destroy worker: every deletion (NFT_MSG_DEL*, and
// DESTROY*, 26 to 31, from Linux 6.3) and a rule replaced in place.
func destroying(m netlink.Message) bool {
	if int(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return false // the batch's begin and end
	}
	switch t := int(m.Header.Type) & 0xff; t {
	case unix.NFT_MSG_DELTABLE, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELRULE, unix.NFT_MSG_DELSET,
		unix.NFT_MSG_DELSETELEM, unix.NFT_MSG_DELOBJ, unix.NFT_MSG_DELFLOWTABLE:
		return true
	case unix.NFT_MSG_NEWRULE:
		return m.Header.Flags&unix.NLM_F_REPLACE != 0
	default:
		return t >= 26 && t <= 31
	}
}

// fakeKernel acknowledges every message of a batch and remembers whether
// any of them destroys.
type fakeKernel struct {
	sent, destroys bool
}

func (k *fakeKernel) dial(req []netlink.Message) ([]netlink.Message, error) {
	if req == nil { // a receive: one acknowledgement
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
	}
	for _, m := range req {
		k.sent = true
		k.destroys = k.destroys || destroying(m)
	}
	return nil, nil
}

// stagingArgs are arguments for batch's methods, by type, each type with
// the variants that differ in what they stage.
func stagingArgs() map[reflect.Type][]reflect.Value {
	tb := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	ch := &nftables.Chain{Name: "c", Table: tb}
	set := &nftables.Set{Name: "s", Table: tb, KeyType: nftables.TypeIPAddr}
	of := func(vs ...any) []reflect.Value {
		out := make([]reflect.Value, len(vs))
		for i, v := range vs {
			out[i] = reflect.ValueOf(v)
		}
		return out
	}
	return map[reflect.Type][]reflect.Value{
		reflect.TypeOf(tb):                      of(tb),
		reflect.TypeOf(ch):                      of(ch),
		reflect.TypeOf(set):                     of(set),
		reflect.TypeOf([]nftables.SetElement{}): of([]nftables.SetElement{{Key: []byte{192, 0, 2, 1}}}),
		reflect.TypeOf(&nftables.Rule{}): of(&nftables.Rule{Table: tb, Chain: ch},
			&nftables.Rule{Table: tb, Chain: ch, Handle: 7}),
	}
}

// calls are every way to call m with one variant of each argument.
func calls(t *testing.T, m reflect.Method, args map[reflect.Type][]reflect.Value) [][]reflect.Value {
	out := [][]reflect.Value{nil}
	for i := 1; i < m.Type.NumIn(); i++ { // 0 is the receiver
		vs, ok := args[m.Type.In(i)]
		if !ok {
			t.Fatalf("batch.%s takes a %s, for which the test has no value: add it to stagingArgs", m.Name, m.Type.In(i))
		}
		var next [][]reflect.Value
		for _, prefix := range out {
			for _, v := range vs {
				next = append(next, append(append([]reflect.Value(nil), prefix...), v))
			}
		}
		out = next
	}
	return out
}

// Whether a commit destroys is known from what was staged, in one place:
// every method of batch stages through a fake kernel, and its verdict
// must be what the messages it sent say. A new deleting method that does
// not mark the batch fails here.
func TestEveryStagingMethodSaysWhetherItsMessagesDestroy(t *testing.T) {
	args := stagingArgs()
	bt := reflect.TypeOf(&batch{})
	for i := 0; i < bt.NumMethod(); i++ {
		m := bt.Method(i)
		if m.Name == "Flush" {
			continue
		}
		for j, in := range calls(t, m, args) {
			t.Run(fmt.Sprintf("%s/%d", m.Name, j), func(t *testing.T) {
				k := &fakeKernel{}
				c, err := nftables.New(nftables.WithTestDial(k.dial))
				if err != nil {
					t.Fatal(err)
				}
				b := &batch{c: c}
				m.Func.Call(append([]reflect.Value{reflect.ValueOf(b)}, in...))
				if err := b.Flush(); err != nil {
					t.Fatalf("flush: %v", err)
				}
				if !k.sent {
					t.Fatalf("batch.%s staged no message", m.Name)
				}
				if b.destroys != k.destroys {
					t.Errorf("batch.%s says destroys=%v, its messages say %v", m.Name, b.destroys, k.destroys)
				}
			})
		}
	}
}
