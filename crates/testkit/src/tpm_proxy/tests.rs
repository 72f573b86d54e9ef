//! The unit tests of `tpm_proxy`: framing, names, profiles, jitter and
//! the proxy before a real swtpm.

use super::wire::{COMMAND_NAMES, MAX_MESSAGE};
use super::*;

#[test]
fn names_and_codes_round_trip() {
    assert_eq!(command_name(0x153), "Create");
    assert_eq!(command_name(0x15E), "Unseal");
    assert_eq!(command_name(0x1FF), "0x1ff");
    assert_eq!(command_code("Load"), Some(0x157));
    assert_eq!(command_code("0x1ff"), Some(0x1FF));
    assert_eq!(command_code("Nonsense"), None);
    for (code, name) in COMMAND_NAMES {
        assert_eq!(command_code(name), Some(*code), "{name}");
    }
}

#[test]
fn frames_a_command_split_across_reads() {
    // TPM2_GetRandom(16), delivered one byte per read.
    let command = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x7B, 0, 16, 0xAA, 0xBB];
    struct OneByte<'a>(&'a [u8]);
    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            buf[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }
    let mut stream = OneByte(&command);
    let (header, message) = read_message(&mut stream).unwrap().unwrap();
    assert_eq!(
        header,
        Header {
            tag: 0x8001,
            size: 12,
            code: 0x17B
        }
    );
    assert_eq!(message, command[..12]);
    // The next message starts where this one ended.
    assert_eq!(stream.0, [0xAA, 0xBB]);
}

#[test]
fn tells_a_clean_close_from_a_cut_message() {
    assert!(read_message(&mut &[][..]).unwrap().is_none());
    let cut = [0x80, 0x01, 0, 0, 0, 20, 0, 0, 1];
    assert_eq!(
        read_message(&mut &cut[..]).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    let short_body = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 1, 0x7B, 0];
    assert!(read_message(&mut &short_body[..]).is_err());
}

#[test]
fn refuses_sizes_that_cannot_frame_a_message() {
    for size in [0u32, 9, MAX_MESSAGE + 1] {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[2..6].copy_from_slice(&size.to_be_bytes());
        assert!(Header::parse(&bytes).is_err(), "{size}");
    }
}

#[test]
fn an_injected_answer_is_a_bare_error_response() {
    assert_eq!(
        error_response(rc::RETRY),
        [0x80, 0x01, 0, 0, 0, 0x0A, 0, 0, 0x09, 0x22]
    );
}

#[test]
fn parses_a_profile() {
    let profile = Profile::parse(
        "# a TPM\n\
             default 100\n\
             jitter 10   # percent\n\
             \n\
             Create 80.5\n\
             0x1ff 3\n",
        "test",
    )
    .unwrap();
    assert_eq!(profile.latency(0x153), Duration::from_micros(80_500));
    assert_eq!(profile.latency(0x1FF), Duration::from_millis(3));
    assert_eq!(profile.latency(0x157), Duration::from_millis(100));
    assert!((profile.jitter() - 0.1).abs() < 1e-9);
}

#[test]
fn profile_errors_name_the_line_and_the_fix() {
    let cases = [
        ("default 1\nCreat 5\n", "test:2: unknown command \"Creat\""),
        ("default 1\nCreate -5\n", "test:2: Create: \"-5\" is not"),
        ("default 1\nCreate 5 ms\n", "test:2: expected `CommandName"),
        ("default 1\ndefault 2\n", "test:2: default is given twice"),
        ("default 1\nLoad 1\nLoad 2\n", "test:3: Load is given twice"),
        (
            "default 1\njitter 150\n",
            "test:2: jitter 150: a percentage",
        ),
        ("Create 5\n", "test: no `default milliseconds` line"),
    ];
    for (text, expected) in cases {
        let error = Profile::parse(text, "test").unwrap_err().to_string();
        assert!(error.starts_with(expected), "{text:?} gave {error:?}");
    }
}

#[test]
fn the_shipped_profiles_parse_and_order_the_chips() {
    let (discrete, firmware) = (Profile::discrete_tpm(), Profile::firmware_tpm());
    for code in [0x131, 0x153, 0x157, 0x15E, 0x165, 0x176] {
        assert!(
            discrete.latency(code) > firmware.latency(code),
            "{}",
            command_name(code)
        );
    }
}

/// A stand-in for swtpm on a port pair: answers every command with
/// success, and CreatePrimary with a fresh transient handle.
fn fake_tpm() -> u16 {
    let (command, control) = listener_pair();
    let port = command.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Bound for as long as the fake answers; never used.
        let _control_port = control;
        let mut next_handle = 0x8000_0000u32;
        for mut stream in command.incoming().flatten() {
            while let Ok(Some((header, _))) = read_message(&mut stream) {
                let mut response = error_response(0);
                if header.code == 0x131 {
                    response[5] = 14;
                    response.extend_from_slice(&next_handle.to_be_bytes());
                    next_handle += 1;
                }
                let _ = stream.write_all(&response);
            }
        }
    });
    port
}

/// One command on its own connection, as the swtpm TCTI sends it.
fn send(proxy: &TpmProxy, code: u32, parameter: Option<u32>) -> Vec<u8> {
    let mut command = vec![0x80, 0x01, 0, 0, 0, 10];
    command.extend_from_slice(&code.to_be_bytes());
    if let Some(word) = parameter {
        command.extend_from_slice(&word.to_be_bytes());
        command[5] = 14;
    }
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).unwrap();
    stream.write_all(&command).unwrap();
    read_message(&mut stream).unwrap().unwrap().1
}

fn return_code(response: &[u8]) -> u32 {
    u32::from_be_bytes(response[6..10].try_into().unwrap())
}

#[test]
fn concurrent_commands_queue_behind_each_other_s_modelled_time() {
    let profile = Profile::parse("default 0\nCreate 60\n", "test").unwrap();
    let proxy = Arc::new(TpmProxy::start(fake_tpm(), profile));
    let started = Instant::now();
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let proxy = proxy.clone();
            std::thread::spawn(move || return_code(&send(&proxy, 0x153, None)))
        })
        .collect();
    for client in clients {
        assert_eq!(client.join().unwrap(), 0);
    }
    assert!(started.elapsed() >= Duration::from_millis(180));
    let modelled = proxy.modelled_delay().as_secs_f64();
    assert!((modelled - 0.18).abs() < 1e-6, "{modelled}");
    assert_eq!(proxy.counts(), BTreeMap::from([("Create".to_string(), 3)]));
    // Scale 0 models no delay: checked on the model, not on the clock,
    // which a loaded machine can hold up past any bound.
    proxy.set_scale(0.0);
    let modelled = proxy.modelled_delay();
    send(&proxy, 0x153, None);
    assert_eq!(proxy.modelled_delay(), modelled);
}

#[test]
fn injected_answers_go_to_the_chosen_command_only() {
    let proxy = TpmProxy::start(fake_tpm(), Profile::instant());
    proxy.inject(Fault::Answer {
        rc: rc::RETRY,
        count: 2,
        only: command_code("Create"),
    });
    assert_eq!(return_code(&send(&proxy, 0x157, None)), 0);
    assert_eq!(send(&proxy, 0x153, None), error_response(rc::RETRY));
    assert_eq!(return_code(&send(&proxy, 0x153, None)), rc::RETRY);
    assert_eq!(proxy.pending_answers(), 0);
    assert_eq!(return_code(&send(&proxy, 0x153, None)), 0);
    assert_eq!(proxy.injected(), 2);
    assert_eq!(proxy.total_commands(), 4);
    proxy.reset_counts();
    assert!(proxy.counts().is_empty());
}

#[test]
fn follows_the_handles_created_and_flushed() {
    let proxy = TpmProxy::start(fake_tpm(), Profile::instant());
    send(&proxy, 0x131, None);
    send(&proxy, 0x131, None);
    assert_eq!(proxy.held_handles(), [0x8000_0000, 0x8000_0001]);
    send(&proxy, CC_FLUSH_CONTEXT, Some(0x8000_0000));
    assert_eq!(proxy.held_handles(), [0x8000_0001]);
    send(&proxy, CC_STARTUP, None);
    assert!(proxy.held_handles().is_empty());
}

#[test]
fn a_hang_holds_answers_until_released_and_a_drop_cuts_them() {
    let proxy = Arc::new(TpmProxy::start(fake_tpm(), Profile::instant()));
    proxy.inject(Fault::Hang);
    let held = {
        let proxy = proxy.clone();
        std::thread::spawn(move || send(&proxy, 0x17A, None))
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(!held.is_finished());
    proxy.release();
    assert_eq!(return_code(&held.join().unwrap()), 0);

    proxy.inject(Fault::Hang);
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).unwrap();
    stream
        .write_all(&[0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x7A])
        .unwrap();
    while proxy.total_commands() < 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    proxy.inject(Fault::DropConnections);
    assert!(!matches!(read_message(&mut stream), Ok(Some(_))));
    proxy.clear_faults();
    assert_eq!(return_code(&send(&proxy, 0x17A, None)), 0);
}

#[test]
fn jitter_stays_within_its_bounds_and_follows_the_seed() {
    let draw = |seed| {
        let mut rng = SplitMix64(seed);
        (0..1000).map(|_| rng.next_unit()).collect::<Vec<f64>>()
    };
    let first = draw(7);
    assert!(first.iter().all(|u| (0.0..1.0).contains(u)));
    assert_eq!(first, draw(7));
    assert_ne!(first, draw(8));
}
