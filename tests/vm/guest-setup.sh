#!/usr/bin/env bash
# mmdebstrap customize hook: configures the guest root at $1 (runs on the host).
# The guest boots, runs /usr/local/sbin/sceau-vm-runner once multi-user.target
# is reached, and powers off when it ends, whatever the outcome.
set -euo pipefail
root=${1:?}

echo sceau-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 sceau-vm\n' >"$root/etc/hosts"
# The payload disk (virtio-blk, so the root stays the only NVMe namespace and
# keeps its name nvme0n1 whatever the probe order) holds the .debs, the units and the checks;
# it is read-only, results go out over the serial console.
cat >"$root/etc/fstab" <<'FSTAB'
/dev/nvme0n1 / ext4 rw,errors=remount-ro 0 1
LABEL=payload /payload ext4 ro,nofail 0 0
FSTAB
mkdir -p "$root/payload"
# The image's own packages were unpacked without man pages and docs
# (build-image.sh's path-exclude options, which mmdebstrap keeps here).
# Packages installed later, the sceau .debs, are installed whole, as on an
# operator's machine, so the purge check sees every file they ship.
rm -f "$root/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
# An empty machine-id: systemd makes a transient one at each boot.
: >"$root/etc/machine-id"

# Nothing the test does not need: no getty on the console the checks print to,
# no timers waking up during the run.
for unit in getty.target getty@tty1.service serial-getty@ttyS0.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
    fstrim.timer man-db.timer systemd-networkd-wait-online.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

cat >"$root/usr/local/sbin/sceau-vm-runner" <<'RUNNER'
#!/bin/sh
# Runs the checks from the payload disk, bounded, between two markers the host
# looks for on the serial console.
echo "SCEAU-VM-BEGIN"
if [ -r /payload/guest-checks.sh ]; then
    timeout -k 5 "${SCEAU_VM_GUEST_TIMEOUT:-240}" bash /payload/guest-checks.sh
    rc=$?
else
    echo "FAIL payload: /payload/guest-checks.sh is missing (payload disk not mounted?)"
    rc=2
fi
echo "SCEAU-VM-END rc=$rc"
RUNNER
chmod 0755 "$root/usr/local/sbin/sceau-vm-runner"

cat >"$root/etc/systemd/system/sceau-vm.service" <<'UNIT'
[Unit]
Description=sceau VM test runner
RequiresMountsFor=/payload
After=multi-user.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
# Type=simple: the boot transaction completes, so is-system-running can say
# "running" while the checks run.
Type=simple
ExecStart=/usr/local/sbin/sceau-vm-runner
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/sceau-vm.service "$root/etc/systemd/system/multi-user.target.wants/sceau-vm.service"
