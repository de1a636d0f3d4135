#!/usr/bin/env bash
# Recipe c: cnitool add / check / status / del / gc with CAP_ARGS and
# CNI_ARGS, on a conflist bridge + host-local + recorder at cniVersion 1.1.0,
# run inside the "host" netns against a "pod" netns made by `ip netns add`.
#   usage: cnitool.sh               (root; run install-deps.sh first)
#   env:   E2E_BIN (default ./bin), E2E_KEEP=1, E2E_TIMEOUT (300)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init cnitool

T=$E2E_TMP
RLOG=$T/recorder.log
NET=e2e-cnitool
POD_NS=e2e-pod-$E2E_ID

step "network namespaces (host, lan, pod)"
e2e_netns_setup
ip netns add "$POD_NS"
e2e_defer "ip netns del $POD_NS"
step_done

step "CNI bin dir + conflist (1.1.0)"
e2e_cni_bin "$T/cni/bin"
mkdir -p "$T/net.d"
e2e_conflist "$NET" 1.1.0 "$RLOG" >"$T/net.d/$NET.conflist"
export NETCONFPATH=$T/net.d CNI_PATH=$T/cni/bin
export CAP_ARGS='{"externalIPs":["198.51.100.20","2001:db8:ff::20"],"io.kubernetes.cri.pod-annotations":{"external-ip/addresses":"198.51.100.21"},"portMappings":[]}'
export CNI_ARGS='EXTERNAL_IPS=198.51.100.22;IgnoreUnknown=1;K8S_POD_NAME=x'
CNITOOL=(timeout 30 nsenter --net="/run/netns/$E2E_HOST_NS" "$E2E_BIN/cnitool")
PODNS_PATH=/run/netns/$POD_NS
# If we fail half-way, tear the attachment down while the plugins are there.
e2e_defer "${CNITOOL[*]} del $NET $PODNS_PATH"
step_done

for verb in add check status del add gc status; do
  step "cnitool $verb"
  out=$("${CNITOOL[@]}" "$verb" "$NET" "$PODNS_PATH") || die "cnitool $verb failed: $out"
  [ -z "$out" ] || printf '%s\n' "$out" | jq -c . >&2 2>/dev/null || printf '%s\n' "$out" >&2
  step_done
done

step "what the pod netns and the host netns hold now (after gc)"
ip -n "$POD_NS" -br addr >&2
ip -n "$E2E_HOST_NS" -br link >&2
step_done

step "recorder log: what cnitool/libcni passed to the chained plugin"
jq -c '{command, containerID, netns, ifname, args,
        runtimeConfig: .stdin.runtimeConfig,
        validAttachments: .stdin["cni.dev/valid-attachments"],
        prevResult: (.stdin.prevResult != null)}' "$RLOG" >&2
cmds=$(jq -r .command "$RLOG" | paste -sd, -)
log "commands: $cmds"
jq -se 'map(select(.command=="ADD"))[0] | .stdin.runtimeConfig.externalIPs == ["198.51.100.20","2001:db8:ff::20"]
        and (.args | test("EXTERNAL_IPS=198.51.100.22"))' "$RLOG" >/dev/null \
  || die "ADD did not carry runtimeConfig.externalIPs and CNI_ARGS"
log "PASS: cnitool passes CAP_ARGS as runtimeConfig (declared capabilities only) and CNI_ARGS verbatim"
[ -z "${E2E_OUT:-}" ] || cp "$RLOG" "$E2E_OUT/cnitool-recorder.jsonl"
step_done
