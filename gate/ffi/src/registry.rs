//! The live gates of the C ABI, by handle.
//!
//! A `KuraGate *` a caller holds is not the address of the gate but a
//! token naming a slot of this registry and the slot's generation. Freeing
//! a gate empties its slot and bumps the generation, so a call on a freed
//! (or never created) handle finds no gate and answers
//! `KURA_GATE_INVALID_HANDLE` instead of reading freed memory. A call looks
//! the gate up under the registry's lock and runs on its own reference
//! (`Arc`), so freeing a gate while another thread is in a call on it is
//! safe: that call finishes, later ones are refused.
//!
//! A token on a 64-bit target: `0x4B47` in the top 16 bits (never a
//! canonical user-space address, so a token is never mistaken for memory),
//! then 24 bits of generation, then 24 bits of slot number plus one (never
//! zero: NULL stays NULL). Freed slots are reused oldest first, so a stale
//! token names a reused slot's new gate only after 2²⁴ reuses of that slot
//! (what the header documents as undetectable). On a 32-bit target the
//! token is 12 bits of generation and 20 of slot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::api::GateHandle;

#[cfg(target_pointer_width = "64")]
mod layout {
    pub(super) const SLOT_BITS: u32 = 24;
    pub(super) const GENERATION_BITS: u32 = 24;
    pub(super) const TAG: usize = 0x4B47 << 48;
}

#[cfg(not(target_pointer_width = "64"))]
mod layout {
    pub(super) const SLOT_BITS: u32 = 20;
    pub(super) const GENERATION_BITS: u32 = 12;
    pub(super) const TAG: usize = 0;
}

use layout::{GENERATION_BITS, SLOT_BITS, TAG};

/// The most gates alive at once (slot numbers are 1 to this).
pub(crate) const MAX_LIVE_GATES: usize = (1 << SLOT_BITS) - 1;
const SLOT_MASK: usize = (1 << SLOT_BITS) - 1;
const GENERATION_MASK: usize = (1 << GENERATION_BITS) - 1;
const TAG_MASK: usize = !((1 << (SLOT_BITS + GENERATION_BITS)) - 1);

/// Why a token names no gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Not a token this library made (or one from another copy of it).
    Unknown,
    /// A gate that was freed.
    Freed,
}

struct Slot {
    generation: usize,
    gate: Option<Arc<GateHandle>>,
}

struct Registry {
    slots: Vec<Slot>,
    /// Empty slots, oldest first.
    free: VecDeque<usize>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    free: VecDeque::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // Nothing panics while the lock is held; a poisoned lock still holds
    // a consistent registry.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn token(slot: usize, generation: usize) -> usize {
    TAG | (generation << SLOT_BITS) | (slot + 1)
}

/// `(slot, generation)` of a token, or `None` when it is not one.
fn parts(token: usize) -> Option<(usize, usize)> {
    if token & TAG_MASK != TAG || token & SLOT_MASK == 0 {
        return None;
    }
    Some((
        (token & SLOT_MASK) - 1,
        (token >> SLOT_BITS) & GENERATION_MASK,
    ))
}

/// Registers a gate and returns its token, or `None` when
/// [`MAX_LIVE_GATES`] are alive.
pub(crate) fn insert(gate: GateHandle) -> Option<usize> {
    let mut registry = registry();
    let slot = match registry.free.pop_front() {
        Some(slot) => slot,
        None if registry.slots.len() < MAX_LIVE_GATES => {
            registry.slots.push(Slot {
                generation: 0,
                gate: None,
            });
            registry.slots.len() - 1
        }
        None => return None,
    };
    let entry = &mut registry.slots[slot];
    entry.gate = Some(Arc::new(gate));
    Some(token(slot, entry.generation))
}

/// The gate a token names.
pub(crate) fn get(token: usize) -> Result<Arc<GateHandle>, Stale> {
    let (slot, generation) = parts(token).ok_or(Stale::Unknown)?;
    let registry = registry();
    let entry = registry.slots.get(slot).ok_or(Stale::Unknown)?;
    match &entry.gate {
        Some(gate) if entry.generation == generation => Ok(Arc::clone(gate)),
        // An older generation of this slot, or the current one emptied.
        _ if generation <= entry.generation => Err(Stale::Freed),
        _ => Err(Stale::Unknown),
    }
}

/// Removes the gate a token names; it is dropped when the last call on it
/// returns.
pub(crate) fn remove(token: usize) -> Result<(), Stale> {
    let (slot, generation) = parts(token).ok_or(Stale::Unknown)?;
    let gate = {
        let mut registry = registry();
        let entry = registry.slots.get_mut(slot).ok_or(Stale::Unknown)?;
        if entry.generation != generation || entry.gate.is_none() {
            return Err(if generation <= entry.generation {
                Stale::Freed
            } else {
                Stale::Unknown
            });
        }
        let gate = entry.gate.take();
        entry.generation = (entry.generation + 1) & GENERATION_MASK;
        registry.free.push_back(slot);
        gate
    };
    // Dropped outside the lock: a large state takes a while to free.
    drop(gate);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_gate_until_freed_and_never_again() {
        let a = insert(GateHandle::new(b"{}").unwrap()).unwrap();
        assert!(get(a).is_ok());
        assert_ne!(a & TAG_MASK, 0, "a token is tagged");
        remove(a).unwrap();
        assert_eq!(get(a).err(), Some(Stale::Freed));
        assert_eq!(remove(a), Err(Stale::Freed));
        // The slot is reused with a new generation: the old token stays dead.
        let tokens: Vec<usize> = (0..4)
            .map(|_| insert(GateHandle::new(b"{}").unwrap()).unwrap())
            .collect();
        assert!(!tokens.contains(&a));
        assert_eq!(get(a).err(), Some(Stale::Freed));
        for t in tokens {
            remove(t).unwrap();
        }
    }

    #[test]
    fn values_that_are_no_token_are_unknown() {
        for value in [1usize, 0x1000, 0x7fff_dead_beef, usize::MAX] {
            assert_eq!(get(value).err(), Some(Stale::Unknown), "{value:#x}");
            assert_eq!(remove(value), Err(Stale::Unknown), "{value:#x}");
        }
        assert_eq!(get(token(SLOT_MASK - 1, 0)).err(), Some(Stale::Unknown));
    }
}
