//! The files `kura-agent timelines` writes: one per instance, named so that
//! two instances never share a file, and written so that nothing but a new
//! regular file inside the directory is ever created or replaced (issue 44).
//!
//! - Names: a namespace is a DNS label (no `.`), so the first `.` of
//!   `{namespace}.{name}.timeline.json` ends it and two instances never map
//!   to one file. A file name longer than [`MAX_FILE_NAME`] bytes (a long
//!   instance name: names run to 253 characters) keeps the start of the
//!   name, then `~` (never in a Kubernetes name) and 32 hexadecimal digits
//!   of the SHA-256 of the whole name.
//! - Writing: into a temporary file created new in the directory (never
//!   through a link: `O_CREAT|O_EXCL|O_NOFOLLOW`), then renamed over the
//!   target, which replaces whatever entry had its name (a file, a symlink,
//!   a hard link, a FIFO) without opening or following it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;

/// The longest file name written, in bytes (`NAME_MAX` of Linux's and
/// macOS's file systems).
pub const MAX_FILE_NAME: usize = 255;

const SUFFIX: &str = ".timeline.json";
/// Hexadecimal digits of the name's digest in a shortened file name.
const DIGEST_HEX: usize = 32;

/// A namespace as Kubernetes allows it: an RFC 1123 label (at most 63
/// lower-case letters, digits and `-`, a letter or digit at each end).
pub fn is_namespace(part: &str) -> bool {
    part.len() <= 63 && is_label(part)
}

/// An instance name as Kubernetes allows it: an RFC 1123 subdomain (at most
/// 253 characters, labels joined by `.`).
pub fn is_name(part: &str) -> bool {
    part.len() <= 253 && part.split('.').all(is_label)
}

fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

/// The file name of an instance's timeline (its namespace and name already
/// checked by [`is_namespace`] and [`is_name`]): distinct instances get
/// distinct names, at most [`MAX_FILE_NAME`] bytes.
pub fn file_name(namespace: &str, name: &str) -> String {
    let plain = format!("{namespace}.{name}{SUFFIX}");
    if plain.len() <= MAX_FILE_NAME {
        return plain;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hex: String = digest
        .as_ref()
        .iter()
        .take(DIGEST_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = MAX_FILE_NAME
        .saturating_sub(namespace.len() + 1 + 1 + DIGEST_HEX + SUFFIX.len())
        .min(name.len());
    // Names are ASCII: any byte index is a character boundary.
    let start = name.get(..keep).unwrap_or_default();
    format!("{namespace}.{start}~{hex}{SUFFIX}")
}

/// Temporary files of this process get distinct names.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// How many temporary names are tried before giving up (a name taken by
/// something planted is skipped, not opened).
const TEMP_ATTEMPTS: usize = 16;

/// A temporary file of ours, removed when dropped unless it was renamed
/// into place (an error, or `--timeout` dropping the write half-way, leaves
/// nothing behind).
struct Temporary(Option<PathBuf>);

impl Temporary {
    /// It is the target now: nothing to remove.
    fn renamed(mut self) {
        self.0 = None;
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Writes `body` as `dir/file_name` (see the module documentation):
/// returns the path written.
pub async fn write_replacing(dir: &Path, file_name: &str, body: &[u8]) -> io::Result<PathBuf> {
    let target = dir.join(file_name);
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".kura-timeline-{}-{n}.tmp", std::process::id()));
        let mut options = tokio::fs::OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW);
        let mut file = match options.open(&path).await {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let temporary = Temporary(Some(path.clone()));
        file.write_all(body).await?;
        file.flush().await?;
        drop(file);
        tokio::fs::rename(&path, &target).await?;
        temporary.renamed();
        return Ok(target);
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary file name free")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kubernetes_names_pass() {
        for good in ["kura-prod", "a", "a1-b"] {
            assert!(is_namespace(good), "{good}");
        }
        for bad in ["", "a.b", "-a", "a-", "A", "a b", "a/b", &"a".repeat(64)] {
            assert!(!is_namespace(bad), "{bad}");
        }
        for good in ["a.b-1", "eu-west", &format!("{}.b", "a".repeat(63))] {
            assert!(is_name(good), "{good}");
        }
        for bad in ["", "..", ".hidden", "a..b", "a.", "a/b", "A", "a\\b", "a~b"] {
            assert!(!is_name(bad), "{bad}");
        }
        assert!(is_name(&"a".repeat(253)) && !is_name(&"a".repeat(254)));
    }

    #[test]
    fn file_names_fit_and_never_collide() {
        assert_eq!(file_name("ns", "a.b"), "ns.a.b.timeline.json");
        // The pair: `a.b/c` cannot be (a namespace has no dot).
        assert!(!is_namespace("a.b"));
        let long = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(long.len(), 253);
        let namespace = "n".repeat(63);
        let one = file_name(&namespace, &long);
        let other = file_name(&namespace, &format!("{}c", &long[..252]));
        assert!(one.len() <= MAX_FILE_NAME, "{}", one.len());
        assert_ne!(one, other);
        assert!(one.contains('~') && one.ends_with(SUFFIX), "{one}");
    }

    #[tokio::test]
    async fn a_planted_temporary_name_is_skipped_and_nothing_is_left_behind() {
        let dir = std::env::temp_dir().join(format!("kura-timeline-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        // The next temporary name, taken by a dangling symlink.
        let next = NEXT_TEMP.load(Ordering::Relaxed);
        let planted = dir.join(format!(".kura-timeline-{}-{next}.tmp", std::process::id()));
        std::os::unix::fs::symlink(dir.join("elsewhere"), &planted).expect("symlink");
        let written = write_replacing(&dir, "ns.a.timeline.json", b"{}")
            .await
            .expect("written");
        assert_eq!(std::fs::read(&written).expect("read"), b"{}");
        assert!(!dir.join("elsewhere").exists(), "followed the planted link");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        // A write that fails (the target is a directory) leaves no file.
        std::fs::create_dir(dir.join("ns.b.timeline.json")).expect("dir target");
        assert!(
            write_replacing(&dir, "ns.b.timeline.json", b"{}")
                .await
                .is_err()
        );
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 3);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
