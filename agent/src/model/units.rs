//! Shard buckets and watch units: where an instance sits when replicas
//! share the fleet, as a pure function of its key.
//!
//! - An instance's **bucket** is `fmix64(fnv1a64("<namespace>/<name>")) >> 56`,
//!   0 to 255 (64-bit FNV-1a, then MurmurHash3's 64-bit finalizer; both
//!   unseeded, so every replica, version and language computes the same
//!   bucket: the test vectors below are the contract's).
//! - The bucket is written as two lowercase hex digits in the
//!   [`SHARD_LABEL`] label of the `KuraInstance` (and, when Kura's
//!   controller adds it, of its pods). The label holds the bucket, never a
//!   replica, so nothing is relabelled when replicas come or go.
//! - A **watch unit** groups `256 / units` consecutive buckets
//!   ([`UnitCount`]); replicas own units, and each replica watches the
//!   instances (and pods) of its own units only, selected on the API
//!   server by [`UnitCount::selector`].

use std::fmt;

use super::InstanceKey;

/// The label carrying an object's shard bucket (two lowercase hex digits).
pub const SHARD_LABEL: &str = "kura.tuist.dev/shard";

/// How many buckets there are (a bucket is one byte).
pub const BUCKETS: u16 = 256;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`, continuing from `hash` ([`FNV_OFFSET_BASIS`]
/// to start).
pub fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The FNV-1a offset basis, where [`fnv1a`] starts.
pub const FNV_OFFSET_BASIS: u64 = FNV_OFFSET;

/// MurmurHash3's 64-bit finalizer.
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The bucket of instance `namespace/name` (see the module documentation).
pub fn bucket(namespace: &str, name: &str) -> u8 {
    let h = fnv1a(FNV_OFFSET, namespace.as_bytes());
    let h = fnv1a(h, b"/");
    let h = fmix64(fnv1a(h, name.as_bytes()));
    // The top byte: the shift leaves exactly eight bits.
    (h >> 56) as u8
}

/// The bucket of `key`.
pub fn bucket_of(key: &InstanceKey) -> u8 {
    bucket(&key.namespace, &key.name)
}

/// `bucket` as the [`SHARD_LABEL`] value: two lowercase hex digits.
pub fn bucket_label(bucket: u8) -> String {
    format!("{bucket:02x}")
}

/// A [`SHARD_LABEL`] value read back: exactly two lowercase hex digits.
pub fn parse_bucket_label(value: &str) -> Option<u8> {
    let ok = value.len() == 2
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        u8::from_str_radix(value, 16).ok()
    } else {
        None
    }
}

/// A unit count that is not a power of two between 1 and 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the unit count must be a power of two from 1 to 256, not {0}")]
pub struct BadUnitCount(pub u32);

/// How many watch units the 256 buckets are grouped into: a power of two
/// from 1 to 256, each unit `256 / count` consecutive buckets. Every
/// replica of a group must use the same count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitCount(u16);

impl UnitCount {
    /// `count` units, if it is a power of two from 1 to 256.
    pub fn new(count: u32) -> Result<Self, BadUnitCount> {
        if count.is_power_of_two() && count <= u32::from(BUCKETS) {
            u16::try_from(count)
                .map(UnitCount)
                .map_err(|_| BadUnitCount(count))
        } else {
            Err(BadUnitCount(count))
        }
    }

    /// The number of units.
    pub fn get(self) -> u16 {
        self.0
    }

    /// Buckets per unit.
    pub fn buckets_per_unit(self) -> u16 {
        BUCKETS / self.0
    }

    /// The unit of `bucket`.
    pub fn unit_of(self, bucket: u8) -> u16 {
        u16::from(bucket) / self.buckets_per_unit()
    }

    /// The unit of instance `key`.
    pub fn unit_of_key(self, key: &InstanceKey) -> u16 {
        self.unit_of(bucket_of(key))
    }

    /// The buckets of `unit`, in order (none for a unit out of range).
    pub fn buckets(self, unit: u16) -> impl Iterator<Item = u8> {
        let per = self.buckets_per_unit();
        let start = if unit < self.0 { unit * per } else { BUCKETS };
        let end = if unit < self.0 { start + per } else { BUCKETS };
        (start..end).filter_map(|b| u8::try_from(b).ok())
    }

    /// The label selector of `unit`'s objects:
    /// `kura.tuist.dev/shard in (a4,a5,a6,a7)`.
    pub fn selector(self, unit: u16) -> String {
        let values: Vec<String> = self.buckets(unit).map(bucket_label).collect();
        format!("{SHARD_LABEL} in ({})", values.join(","))
    }
}

impl fmt::Display for UnitCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for UnitCount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n: u32 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
        UnitCount::new(n).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's test vectors: a stamper in another language must
    /// compute these buckets (docs/sharding.md lists them too).
    /// Computed by an independent Python implementation of FNV-1a-64 and
    /// fmix64.
    pub(crate) const VECTORS: &[(&str, &str, u8)] = &[
        ("kura", "acme", 111),
        ("kura", "tuist", 84),
        ("kura", "a", 81),
        ("default", "kura-0", 239),
        ("tenant-3", "kura-17", 93),
        (
            "kura",
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            63,
        ),
    ];

    #[test]
    fn fnv_is_the_published_algorithm() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), FNV_OFFSET);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn buckets_are_pinned() {
        for (ns, name, want) in VECTORS {
            assert_eq!(bucket(ns, name), *want, "{ns}/{name}");
        }
        // Independent of how the key is split: the hash is over "ns/name".
        assert_eq!(bucket("kura", "acme"), {
            let h = fmix64(fnv1a(FNV_OFFSET, b"kura/acme"));
            (h >> 56) as u8
        });
    }

    #[test]
    fn labels_round_trip_and_refuse_anything_else() {
        for b in 0..=255u8 {
            assert_eq!(parse_bucket_label(&bucket_label(b)), Some(b));
        }
        for bad in ["", "0", "0A", "100", "g0", " 1", "-1", "+1"] {
            assert_eq!(parse_bucket_label(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn unit_counts_are_powers_of_two_up_to_256() {
        for ok in [1, 2, 4, 64, 256] {
            assert_eq!(UnitCount::new(ok).map(UnitCount::get), Ok(ok as u16));
        }
        for bad in [0, 3, 6, 100, 512] {
            assert_eq!(UnitCount::new(bad), Err(BadUnitCount(bad)));
        }
    }

    #[test]
    fn units_partition_the_buckets_in_order() {
        for count in [1u32, 2, 4, 16, 64, 256] {
            let units = UnitCount::new(count).expect("count");
            let mut all = Vec::new();
            for u in 0..units.get() {
                for b in units.buckets(u) {
                    assert_eq!(units.unit_of(b), u);
                    all.push(b);
                }
            }
            assert_eq!(all, (0..=255u8).collect::<Vec<_>>(), "{count}");
            assert_eq!(units.buckets(units.get()).count(), 0);
        }
        let u64s = UnitCount::new(64).expect("count");
        assert_eq!(u64s.selector(41), "kura.tuist.dev/shard in (a4,a5,a6,a7)");
        let u256 = UnitCount::new(256).expect("count");
        assert_eq!(u256.selector(10), "kura.tuist.dev/shard in (0a)");
    }
}
