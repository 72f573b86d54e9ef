//! What a verified log says about the boot (module documentation, "What a
//! verified log says"): Secure Boot, boot applications, a firmware
//! debugger, completeness.

use super::parse::Variable;
use super::*;

impl Facts {
    /// What the facts of several verified banks of one log say together:
    /// `first`'s, where every bank agrees. The data a fact is read from
    /// must hash to its digest in the bank it is read in, and an event
    /// whose data no check ties to its digests (an authority) may be
    /// measured in one bank and not in another; where banks disagree the
    /// fact is unknown (a firmware debugger seen in any bank is reported).
    /// Boot applications are `first`'s digests, and only when every bank
    /// has PCR 4 sealed.
    pub fn agreed(first: Facts, others: &[Facts]) -> Facts {
        let all = || std::iter::once(&first).chain(others);
        let secure_boot = first
            .secure_boot
            .filter(|state| others.iter().all(|o| o.secure_boot == Some(*state)));
        let firmware_debugger = if all().any(|f| f.firmware_debugger == Some(true)) {
            Some(true)
        } else if all().all(|f| f.firmware_debugger == Some(false)) {
            Some(false)
        } else {
            None
        };
        let complete = all().all(|f| f.complete);
        let sealed_4 = others.iter().all(|o| o.boot_applications.is_some());
        Facts {
            secure_boot,
            boot_applications: first.boot_applications.filter(|_| sealed_4),
            firmware_debugger,
            complete,
        }
    }
}

impl Verified<'_> {
    pub fn bank(&self) -> Bank {
        self.bank
    }

    /// Whether `pcr` was among the checked PCRs.
    pub fn covers(&self, pcr: u8) -> bool {
        usize::from(pcr) < PCR_COUNT && self.pcrs & (1 << pcr) != 0
    }

    pub fn facts(&self) -> Facts {
        Facts {
            secure_boot: self.sealed(7).then(|| self.secure_boot()).flatten(),
            boot_applications: self.sealed(4).then(|| {
                self.extending(4)
                    .filter(|e| e.event_type == EV_EFI_BOOT_SERVICES_APPLICATION)
                    .map(|e| self.digest(e).to_vec())
                    .collect()
            }),
            // By digest, whatever the type: relabelling the event cannot
            // hide it.
            firmware_debugger: self.sealed(7).then(|| {
                self.extending(7)
                    .any(|e| self.digest_of(e, b"UEFI Debug Mode"))
            }),
            complete: BOOT_PCRS.iter().all(|&pcr| self.sealed(pcr)),
        }
    }

    /// The events that extended `pcr`, in order.
    fn extending(&self, pcr: u8) -> impl Iterator<Item = &Event> {
        self.log
            .events
            .iter()
            .filter(move |e| e.pcr == pcr && e.extends())
    }

    /// The event's digest in the verified bank (every event has one).
    fn digest<'e>(&self, event: &'e Event) -> &'e [u8] {
        event.digest(self.bank.alg_id()).unwrap_or_default()
    }

    /// Whether the event's digest in the verified bank is the hash of
    /// `data`.
    fn digest_of(&self, event: &Event, data: &[u8]) -> bool {
        self.bank.hash(&[data]) == self.digest(event)
    }

    /// Whether the event's data is what was measured.
    fn data_measured(&self, event: &Event) -> bool {
        self.digest_of(event, &event.data)
    }

    /// An EV_EFI_ACTION with one of these strings, as measured.
    fn is_action(&self, event: &Event, strings: &[&str]) -> bool {
        let text = event.data.strip_suffix(b"\0").unwrap_or(&event.data);
        event.event_type == EV_EFI_ACTION
            && strings.iter().any(|s| s.as_bytes() == text)
            && self.data_measured(event)
    }

    /// Read from every event of PCR 7 whose data is the EFI global
    /// variable `SecureBoot` and is what was measured, whatever its type
    /// says: a relabelled measurement still counts. There must be exactly
    /// one, before the separator, of one byte 0 or 1.
    fn secure_boot(&self) -> Option<bool> {
        let mut separated = false;
        let mut state = None;
        for event in self.extending(7) {
            if event.event_type == EV_SEPARATOR {
                separated = true;
                continue;
            }
            let Some(variable) = self.is_secure_boot(event) else {
                continue;
            };
            if separated || state.is_some() {
                return None;
            }
            state = Some(match variable.data {
                [0] => false,
                [1] => true,
                _ => return None,
            });
        }
        state
    }

    /// The event's data, if it is the EFI global variable `SecureBoot`
    /// and what was measured, whatever the event's type.
    fn is_secure_boot<'e>(&self, event: &'e Event) -> Option<Variable<'e>> {
        Variable::parse(&event.data)
            .filter(|v| v.is(&EFI_GLOBAL_VARIABLE, "SecureBoot") && self.data_measured(event))
    }

    /// Whether `pcr` was verified and holds exactly one separator, of data
    /// `00000000`, with only the events allowed there after it. Separators
    /// are known by their digests (`parse` refused any event that carries
    /// a separator's digest under another type), so no relabelling moves
    /// or hides one; whatever else is extended after it unseals the PCR,
    /// and the facts read from it become unknown.
    fn sealed(&self, pcr: u8) -> bool {
        if !self.covers(pcr) {
            return false;
        }
        let mut separators = 0;
        for event in self.extending(pcr) {
            if event.event_type == EV_SEPARATOR {
                separators += 1;
                if separators > 1 || event.data != [0; 4] {
                    return false;
                }
            } else if separators == 1 && !self.allowed_after_separator(pcr, event) {
                return false;
            }
        }
        separators == 1
    }

    fn allowed_after_separator(&self, pcr: u8, event: &Event) -> bool {
        match (pcr, event.event_type) {
            (1, EV_EFI_VARIABLE_BOOT | EV_EFI_VARIABLE_BOOT2) => true,
            (4, EV_EFI_BOOT_SERVICES_APPLICATION) => true,
            (4, EV_EFI_ACTION) => self.is_action(
                event,
                &[
                    "Calling EFI Application from Boot Option",
                    "Returning from EFI Application from Boot Option",
                ],
            ),
            (5, EV_EFI_GPT_EVENT) => true,
            (5, EV_EFI_ACTION) => self.is_action(
                event,
                &[
                    "Exit Boot Services Invocation",
                    "Exit Boot Services Returned with Success",
                    "Exit Boot Services Returned with Failure",
                ],
            ),
            // Not the SecureBoot variable, which is no authority.
            (7, EV_EFI_VARIABLE_AUTHORITY) => self.is_secure_boot(event).is_none(),
            _ => false,
        }
    }
}
