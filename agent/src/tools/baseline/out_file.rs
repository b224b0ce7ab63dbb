//! Writing a command's document to `--out FILE` without changing what FILE
//! is. A regular file (or a new path) is replaced whole or not at all: a
//! temporary file next to it, created new (never through an existing file
//! or link), renamed over it. A symbolic link is followed and its target
//! written the same way, so the link stays a link. A FIFO or a character
//! device (`/dev/stdout`, a pipe, `/dev/full`) is written through, as a
//! shell redirection would: a rename would replace the device node with a
//! regular file (issue 32). Anything else (a directory, a block device, a
//! socket, a link to nothing) is refused.

use std::fs::{FileType, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

/// Why `--out FILE` was not written.
#[derive(Debug, thiserror::Error)]
pub enum OutFileError {
    /// FILE is something a document cannot be written to.
    #[error("{kind}: not written (only a regular file, a new path, a FIFO or a character device)")]
    Refused {
        /// What FILE is.
        kind: &'static str,
    },
    /// Reading what FILE is, writing or renaming failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes `text` and a newline to `path` (see the module documentation).
pub fn write(path: &Path, text: &str) -> Result<(), OutFileError> {
    let bytes = format!("{text}\n");
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => replace_whole(path, &bytes),
        Err(e) => Err(e.into()),
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = match std::fs::metadata(path) {
                Ok(target) => target,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(OutFileError::Refused {
                        kind: "a symbolic link to nothing",
                    });
                }
                Err(e) => return Err(e.into()),
            };
            if target.file_type().is_file() {
                // The link stays; its target is replaced whole.
                replace_whole(&std::fs::canonicalize(path)?, &bytes)
            } else {
                write_to(path, target.file_type(), &bytes)
            }
        }
        Ok(meta) if meta.file_type().is_file() => replace_whole(path, &bytes),
        Ok(meta) => write_to(path, meta.file_type(), &bytes),
    }
}

/// Writes through a FIFO or character device; refuses anything else.
fn write_to(path: &Path, kind: FileType, bytes: &str) -> Result<(), OutFileError> {
    if !(kind.is_fifo() || kind.is_char_device()) {
        return Err(OutFileError::Refused {
            kind: describe(kind),
        });
    }
    let mut out = OpenOptions::new().write(true).open(path)?;
    out.write_all(bytes.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn describe(kind: FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// A temporary file next to `path` (created new), renamed over it.
fn replace_whole(path: &Path, bytes: &str) -> Result<(), OutFileError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes.as_bytes())?;
            f.sync_all()
        });
    if let Err(e) = written {
        // Only a file this call created is removed.
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            let _ = std::fs::remove_file(&tmp);
        }
        return Err(e.into());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kura-out-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_path_and_a_regular_file_are_replaced_whole() {
        let d = dir("regular");
        let out = d.join("baseline.json");
        write(&out, "{}").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{}\n");
        write(&out, "{\"a\": 1}").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"a\": 1}\n");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "no temporary left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_stays_a_fifo_and_gets_the_document() {
        let d = dir("fifo");
        let fifo = d.join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A reader that does not block opening (the document fits the
        // pipe's buffer).
        let mut reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        write(&fifo, "{\"doc\": true}").unwrap();
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the FIFO was replaced: {kind:?}");
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "{\"doc\": true}\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symbolic_link_stays_a_link_and_its_target_is_written() {
        let d = dir("link");
        let target = d.join("real.json");
        std::fs::write(&target, "old\n").unwrap();
        let link = d.join("baseline.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write(&link, "new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        // A link to nothing is refused, and stays.
        let dangling = d.join("dangling.json");
        std::os::unix::fs::symlink(d.join("missing"), &dangling).unwrap();
        let e = write(&dangling, "x").unwrap_err();
        assert!(e.to_string().contains("a symbolic link to nothing"), "{e}");
        assert!(
            std::fs::symlink_metadata(&dangling)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(!d.join("missing").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_is_refused_and_a_planted_temporary_is_not_followed() {
        let d = dir("refuse");
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = write(&sub, "x").unwrap_err();
        assert!(e.to_string().starts_with("a directory: not written"), "{e}");
        assert!(sub.is_dir());
        // A link planted where the temporary file goes is not written
        // through.
        let victim = d.join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let out = d.join("baseline.json");
        std::os::unix::fs::symlink(
            &victim,
            d.join(format!("baseline.json.tmp-{}", std::process::id())),
        )
        .unwrap();
        assert!(write(&out, "x").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(!out.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
