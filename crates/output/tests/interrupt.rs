//! A run ended by SIGTERM while several threads write (plain files, a file a tool writes by name,
//! folder outputs written whole) leaves no temporary and no partial file, whenever the signal
//! comes. The writer is this test binary run again as a child (`CHILD` set): the signal ends the
//! process, so it cannot be the test's own.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "CREDIT_OUTPUT_INTERRUPT_CHILD";
const PLAIN: usize = 64 << 10;
const BY_NAME: usize = 256 << 10;

#[test]
fn a_signal_leaves_no_temporary_and_no_partial_file() {
    if let Some(dir) = std::env::var_os(CHILD) {
        write_until_signalled(Path::new(&dir));
    }
    let mut interrupted = 0;
    for round in 0..40u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_signal_leaves_no_temporary_and_no_partial_file",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Signalled once every writer has written once, then at moments spread over their work.
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("writing") {
            line.clear();
            assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "the child ended");
        }
        std::thread::sleep(Duration::from_micros(round * 397 % 20_000));
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        let _ = stdout.read_to_string(&mut String::new());
        assert_eq!(status.code(), Some(143), "round {round}: {status:?}");
        interrupted += 1;
        for (path, len) in files(dir.path()) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                !name.contains(".tmp"),
                "round {round}: a temporary was left: {}",
                path.display()
            );
            let expected = match name.as_str() {
                ".credit-manifest.json" => continue,
                "by-name.bin" => BY_NAME,
                _ => PLAIN,
            };
            assert_eq!(len, expected as u64, "round {round}: {}", path.display());
        }
    }
    assert_eq!(interrupted, 40);
}

/// Every file under `dir` with its length.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            out.extend(files(&entry.path()));
        } else {
            out.push((entry.path(), meta.len()));
        }
    }
    out
}

/// The child: three writers, each saying once that it wrote, until the signal ends the process.
fn write_until_signalled(dir: &Path) -> ! {
    credit_output::interrupt::install();
    let writers: [fn(&Path, u64); 3] = [plain, by_name, folder];
    for writer in writers {
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            for i in 0.. {
                writer(&dir, i);
                if i == 0 {
                    println!("writing");
                }
            }
        });
    }
    loop {
        std::thread::park();
    }
}

fn plain(dir: &Path, i: u64) {
    let target = dir.join(format!("plain-{}.txt", i % 3));
    credit_output::write_file(&target, |f| std::io::Write::write_all(f, &[b'p'; PLAIN])).unwrap();
}

/// As safetensors does: the tool opens the temporary by its name (after a moment's work).
fn by_name(dir: &Path, _: u64) {
    let target = dir.join("by-name.bin");
    credit_output::write_file_at(&target, |tmp| {
        std::thread::sleep(Duration::from_millis(1));
        std::fs::write(tmp, [b'n'; BY_NAME]).map_err(Failed::Tool)
    })
    .unwrap();
}

#[derive(Debug)]
#[allow(dead_code)] // read by the panic message
enum Failed {
    Tool(std::io::Error),
    Output(credit_output::Error),
}

impl From<credit_output::Error> for Failed {
    fn from(e: credit_output::Error) -> Self {
        Failed::Output(e)
    }
}

fn folder(dir: &Path, i: u64) {
    use credit_output::{Commit, Inputs, OutputDir, Stale};
    let path = dir.join(format!("folder-{}", i % 2));
    let out = OutputDir::open(
        &path,
        "test",
        &Inputs::new([dir.join("none")]),
        Commit::Whole,
    )
    .unwrap();
    for name in ["a.txt", "b.txt", "c.txt"] {
        credit_output::write_file(&out.join(name), |f| {
            std::io::Write::write_all(f, &[b'f'; PLAIN])
        })
        .unwrap();
    }
    out.finish(Stale::Remove).unwrap();
}
