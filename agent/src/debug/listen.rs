//! Binding the debug listener. The unspecified IPv6 address `[::]` (the
//! default) is bound dual-stack, so kubelet's probes and Prometheus reach
//! the server over IPv4 and IPv6 alike (an IPv4-only `0.0.0.0` is refused
//! on IPv6 single-stack clusters and the pod crash-loops). On a host
//! without IPv6 at all, `[::]` falls back to `0.0.0.0` on the same port.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};

/// Pending connections the kernel queues before `accept`.
const BACKLOG: i32 = 1024;

/// Binds `addr` and listens. `[::]:port` accepts IPv4 (as mapped
/// addresses) and IPv6 whatever `net.ipv6.bindv6only` says; other addresses
/// are bound as given. Returns the listener and, when `[::]` had to fall back
/// to `0.0.0.0` because the host has no IPv6, a note saying so.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<(tokio::net::TcpListener, Option<String>)> {
    match bind_one(addr) {
        Ok(listener) => Ok((listener, None)),
        Err(error) if is_dual_stack(addr) && no_ipv6(&error) => {
            let fallback = SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port()));
            let listener = bind_one(fallback)?;
            Ok((
                listener,
                Some(format!(
                    "{addr} is not available ({error}): listening on IPv4 only, {fallback}"
                )),
            ))
        }
        Err(error) => Err(error),
    }
}

fn is_dual_stack(addr: SocketAddr) -> bool {
    addr.is_ipv6() && addr.ip().is_unspecified()
}

/// The host has no IPv6: the address family is unsupported, or `::` cannot
/// be assigned.
fn no_ipv6(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::AddrNotAvailable
        || error.raw_os_error() == Some(libc::EAFNOSUPPORT)
}

fn bind_one(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if is_dual_stack(addr) {
        socket.set_only_v6(false)?;
    }
    // As tokio's own bind: a restarted agent rebinds its port at once.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    tokio::net::TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_unspecified_ipv6_address_is_dual_stack() {
        let parse = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert!(is_dual_stack(parse("[::]:8080")));
        assert!(!is_dual_stack(parse("[::1]:8080")));
        assert!(!is_dual_stack(parse("0.0.0.0:8080")));
        assert!(!is_dual_stack(parse("127.0.0.1:8080")));
    }

    #[test]
    fn a_missing_address_family_falls_back_and_other_errors_do_not() {
        assert!(no_ipv6(&io::Error::from_raw_os_error(libc::EAFNOSUPPORT)));
        assert!(no_ipv6(&io::Error::from_raw_os_error(libc::EADDRNOTAVAIL)));
        assert!(!no_ipv6(&io::Error::from_raw_os_error(libc::EADDRINUSE)));
        assert!(!no_ipv6(&io::Error::from_raw_os_error(libc::EACCES)));
    }
}
