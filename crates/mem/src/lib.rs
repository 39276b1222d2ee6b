//! `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp` for the shipped amd64 binary, which is
//! linked statically with musl (docs/performance.md, "A musl build").
//!
//! Why our own: musl's x86_64 `memcpy` is `rep movsq` with byte-at-a-time `movsb` before and
//! after it, and its `memcmp` a C loop over bytes. Rust code copies and compares many small
//! blocks (moves of values, string and path pieces), where a `rep` instruction's start-up
//! dominates: in a profile of the runtime shim's create of 8 GPUs, `memcpy` alone was 7 % of the
//! process's CPU, three quarters of it on the `rep movsq` and the byte tail. Here a block of up
//! to 64 bytes is copied with at most four pairs of overlapping unaligned loads and stores, all
//! loads before any store (so the same code serves `memmove`), and a larger one with `rep
//! movsb`, which CPUs with ERMS (Intel since Ivy Bridge, AMD since Zen 3) run at full speed.
//!
//! Exported under the C names only in the musl x86_64 build (the linker then takes these and
//! never pulls musl's from libc.a, musl's own code included); elsewhere (glibc's are fast) they
//! are plain functions, which the unit tests check against simple byte loops. The crate is
//! `no_builtins`, so LLVM does not turn their code back into calls to themselves.

#![no_std]
#![no_builtins]
#![cfg(target_arch = "x86_64")]

use core::arch::asm;
use core::ptr::{read_unaligned as ld, write_unaligned as st};

/// Copies `n <= 64` bytes from `s` to `d`: every load before any store, so the blocks may
/// overlap.
///
/// # Safety
/// `s` readable and `d` writable for `n` bytes.
#[inline(always)]
unsafe fn copy_small(d: *mut u8, s: *const u8, n: usize) {
    if n >= 32 {
        let a: u128 = ld(s.cast());
        let b: u128 = ld(s.add(16).cast());
        let c: u128 = ld(s.add(n - 32).cast());
        let e: u128 = ld(s.add(n - 16).cast());
        st(d.cast(), a);
        st(d.add(16).cast(), b);
        st(d.add(n - 32).cast(), c);
        st(d.add(n - 16).cast(), e);
    } else if n >= 16 {
        let a: u128 = ld(s.cast());
        let b: u128 = ld(s.add(n - 16).cast());
        st(d.cast(), a);
        st(d.add(n - 16).cast(), b);
    } else if n >= 8 {
        let a: u64 = ld(s.cast());
        let b: u64 = ld(s.add(n - 8).cast());
        st(d.cast(), a);
        st(d.add(n - 8).cast(), b);
    } else if n >= 4 {
        let a: u32 = ld(s.cast());
        let b: u32 = ld(s.add(n - 4).cast());
        st(d.cast(), a);
        st(d.add(n - 4).cast(), b);
    } else if n >= 2 {
        let a: u16 = ld(s.cast());
        let b: u16 = ld(s.add(n - 2).cast());
        st(d.cast(), a);
        st(d.add(n - 2).cast(), b);
    } else if n == 1 {
        *d = *s;
    }
}

/// `rep movsb` forwards.
///
/// # Safety
/// As [`memcpy`]; the blocks may overlap only with `d <= s`.
#[inline(always)]
unsafe fn rep_movsb(d: *mut u8, s: *const u8, n: usize) {
    asm!(
        "rep movsb",
        inout("rcx") n => _,
        inout("rdi") d => _,
        inout("rsi") s => _,
        options(nostack, preserves_flags)
    );
}

/// C's `memcpy`.
///
/// # Safety
/// `s` readable and `d` writable for `n` bytes, not overlapping.
#[cfg_attr(all(target_env = "musl", not(test)), no_mangle)]
pub unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    if n <= 64 {
        copy_small(d, s, n);
    } else {
        rep_movsb(d, s, n);
    }
    d
}

/// C's `memmove`.
///
/// # Safety
/// `s` readable and `d` writable for `n` bytes; they may overlap.
#[cfg_attr(all(target_env = "musl", not(test)), no_mangle)]
pub unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    if n <= 64 {
        copy_small(d, s, n);
    } else if (d as usize).wrapping_sub(s as usize) >= n {
        // `d` before `s`, or past its end: a forward copy never reads what it wrote.
        rep_movsb(d, s, n);
    } else {
        // `d` inside the source: backwards, from the last byte (the direction flag is clear
        // again before returning, as the ABI requires).
        asm!(
            "std",
            "rep movsb",
            "cld",
            inout("rcx") n => _,
            inout("rdi") d.add(n - 1) => _,
            inout("rsi") s.add(n - 1) => _,
            options(nostack)
        );
    }
    d
}

/// C's `memset`.
///
/// # Safety
/// `d` writable for `n` bytes.
#[cfg_attr(all(target_env = "musl", not(test)), no_mangle)]
pub unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
    let b = c as u8;
    if n <= 64 {
        let v8 = u64::from(b) * 0x0101_0101_0101_0101;
        if n >= 16 {
            let v = u128::from(v8) | (u128::from(v8) << 64);
            st(d.cast(), v);
            st(d.add(n - 16).cast(), v);
            if n > 32 {
                st(d.add(16).cast(), v);
                st(d.add(n - 32).cast(), v);
            }
        } else if n >= 8 {
            st(d.cast(), v8);
            st(d.add(n - 8).cast(), v8);
        } else if n >= 4 {
            st(d.cast(), v8 as u32);
            st(d.add(n - 4).cast(), v8 as u32);
        } else if n >= 2 {
            st(d.cast(), v8 as u16);
            st(d.add(n - 2).cast(), v8 as u16);
        } else if n == 1 {
            *d = b;
        }
    } else {
        asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") d => _,
            in("al") b,
            options(nostack, preserves_flags)
        );
    }
    d
}

/// The first difference of `a` and `b` in `n` bytes, as C's `memcmp`: eight bytes at a time,
/// read as big-endian numbers so that their order is the bytes' order.
///
/// # Safety
/// `a` and `b` readable for `n` bytes.
#[cfg_attr(all(target_env = "musl", not(test)), no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_be(ld(a.add(i).cast()));
        let y = u64::from_be(ld(b.add(i).cast()));
        if x != y {
            return if x < y { -1 } else { 1 };
        }
        i += 8;
    }
    while i < n {
        let (x, y) = (*a.add(i), *b.add(i));
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// C's `bcmp`: zero when equal (Rust's slice comparisons call it).
///
/// # Safety
/// As [`memcmp`].
#[cfg_attr(all(target_env = "musl", not(test)), no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        if ld::<u64>(a.add(i).cast()) != ld::<u64>(b.add(i).cast()) {
            return 1;
        }
        i += 8;
    }
    while i < n {
        if *a.add(i) != *b.add(i) {
            return 1;
        }
        i += 1;
    }
    0
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Every size to 300 (each branch and its edges), at every alignment of 0 to 15 of both.
    #[test]
    fn copies_as_a_byte_loop_does() {
        for n in 0..300 {
            for (da, sa) in [(0, 0), (1, 0), (0, 3), (7, 9), (15, 1), (8, 8)] {
                let src = pattern(n + sa + 16, 1);
                let mut dst = std::vec![0xAAu8; n + da + 32];
                let mut want = dst.clone();
                want[da..da + n].copy_from_slice(&src[sa..sa + n]);
                let r = unsafe { memcpy(dst.as_mut_ptr().add(da), src.as_ptr().add(sa), n) };
                assert_eq!(r, unsafe { dst.as_mut_ptr().add(da) });
                assert_eq!(dst, want, "memcpy n={n} da={da} sa={sa}");
            }
        }
    }

    /// Overlapping moves both ways, at every distance that matters for the branches.
    #[test]
    fn moves_overlapping_blocks() {
        for n in 0..300 {
            for shift in [1usize, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100] {
                let base = pattern(n + shift, 5);
                // Forwards: destination after the source.
                let mut buf = base.clone();
                let mut want = base.clone();
                want.copy_within(0..n, shift);
                unsafe { memmove(buf.as_mut_ptr().add(shift), buf.as_ptr(), n) };
                assert_eq!(buf, want, "memmove up n={n} shift={shift}");
                // Backwards: destination before the source.
                let mut buf = base.clone();
                let mut want = base.clone();
                want.copy_within(shift..shift + n, 0);
                unsafe { memmove(buf.as_mut_ptr(), buf.as_ptr().add(shift), n) };
                assert_eq!(buf, want, "memmove down n={n} shift={shift}");
            }
        }
    }

    #[test]
    fn sets_every_size() {
        for n in 0..300 {
            for a in [0usize, 1, 9] {
                let mut buf = std::vec![7u8; n + a + 16];
                let mut want = buf.clone();
                want[a..a + n].fill(0xC3);
                let r = unsafe { memset(buf.as_mut_ptr().add(a), 0x1C3, n) };
                assert_eq!(r, unsafe { buf.as_mut_ptr().add(a) });
                assert_eq!(buf, want, "memset n={n} a={a}");
            }
        }
    }

    /// The sign of the first difference, as a byte loop gives it, wherever it is; equal blocks
    /// are 0; `bcmp` is zero exactly when they are equal.
    #[test]
    fn compares_as_a_byte_loop_does() {
        fn slow(a: &[u8], b: &[u8]) -> i32 {
            a.iter()
                .zip(b)
                .find(|(x, y)| x != y)
                .map_or(0, |(x, y)| i32::from(*x) - i32::from(*y))
        }
        for n in 0..80 {
            let a = pattern(n + 1, 3);
            assert_eq!(unsafe { memcmp(a.as_ptr(), a.as_ptr(), n) }, 0);
            assert_eq!(unsafe { bcmp(a.as_ptr(), a.as_ptr(), n) }, 0);
            for at in 0..n {
                for delta in [1u8, 0x80, 0xFF] {
                    let mut b = a.clone();
                    b[at] = b[at].wrapping_add(delta);
                    let got = unsafe { memcmp(a.as_ptr(), b.as_ptr(), n) };
                    assert_eq!(
                        got.signum(),
                        slow(&a[..n], &b[..n]).signum(),
                        "n={n} at={at}"
                    );
                    assert_ne!(unsafe { bcmp(a.as_ptr(), b.as_ptr(), n) }, 0);
                    let back = unsafe { memcmp(b.as_ptr(), a.as_ptr(), n) };
                    assert_eq!(back.signum(), -got.signum());
                }
            }
        }
    }
}
