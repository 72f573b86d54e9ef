#!/bin/sh
# Usage: check-etcd.sh [PREFIX]
# Lists every Secret whose value in etcd does not begin with PREFIX (default
# k8s:enc:kms:v2:sceau:, sceau's), or with PREFIX "plaintext", every Secret
# stored encrypted. Exits 1 if it listed one. etcdctl takes its endpoint and
# certificates from ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT and
# ETCDCTL_KEY.
want=${1:-k8s:enc:kms:v2:sceau:}
total=0 bad=0
for key in $(etcdctl get --prefix --keys-only /registry/secrets/); do
    total=$((total + 1))
    if [ "$want" = plaintext ]; then
        start=$(etcdctl get --print-value-only "$key" | head -c 8)
        [ "$start" != "k8s:enc:" ] && continue
    else
        start=$(etcdctl get --print-value-only "$key" | head -c ${#want})
        [ "$start" = "$want" ] && continue
    fi
    echo "$key begins with ${start:-nothing}"
    bad=$((bad + 1))
done
echo "$total Secrets in etcd, $bad not as expected ($want)"
[ "$bad" -eq 0 ]
