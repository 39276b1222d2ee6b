//! The `gpuctk` binary's global allocator.
//!
//! Why our own: the shipped binary is linked statically with musl (docs/performance.md, "A musl
//! build"), whose start-up is about 0.2 ms cheaper than glibc's on every exec, but whose malloc
//! maps and unmaps memory on most size changes (a create of 8 GPUs made 157 `mmap`/`munmap`
//! calls under it, and took 0.5 ms more CPU than under glibc's malloc). The processes this
//! allocator serves are short (a runtime call, a hook) or small (the CLI), so it can be simple:
//!
//! - a request of up to [`LARGE`] bytes is rounded up to a size class (multiples of 16 up to
//!   1 KiB, then powers of two); a freed block goes on its class's free list and is handed out
//!   again for the same class, so memory in use never grows past the peak of each class;
//! - blocks are carved from chunks mapped on demand: a first one of 64 KiB, then 1 MiB ones,
//!   each made present 64 KiB, then 128 KiB at a time, just before blocks are carved from there
//!   (`madvise(MADV_POPULATE_WRITE)`: one call instead of a page fault per page, and no page
//!   made present that no block reaches but the rest of a step); nothing is unmapped;
//! - a block that grows while it is the last one carved grows where it is (a `Vec` doubling
//!   through its classes, a serialized document: no copy, no pages left behind in a free list);
//! - a larger request is its own mapping, unmapped when freed and grown with `mremap`.
//!
//! Rust hands the size and alignment back on every free, so a block carries no header. One
//! spin lock guards the lists: the binary's threads are few and its critical sections short.
//! A failed mapping is a null pointer, which std turns into its allocation-failure abort.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, null_mut};
use core::sync::atomic::{AtomicBool, Ordering};

/// The alignment every class block has (that of `max_align_t`).
const MIN_ALIGN: usize = 16;
/// Classes of 16, 32, ... 1024 bytes.
const SMALL_MAX: usize = 1024;
const SMALL_CLASSES: usize = SMALL_MAX / MIN_ALIGN;
/// Then 2, 4, ... 256 KiB.
const POW2_CLASSES: usize = 8;
/// Above this a request is a mapping of its own.
pub const LARGE: usize = SMALL_MAX << POW2_CLASSES;
const CLASSES: usize = SMALL_CLASSES + POW2_CLASSES;
/// What is mapped at a time to carve class blocks from.
const CHUNK: usize = 1 << 20;
/// The first chunk, left to page faults: a pass-through call touches a few of its pages, and
/// a create without GPUs fits in it.
const FIRST_CHUNK: usize = 64 << 10;
/// How much of a later chunk is made present at a time.
const STEP: usize = 64 << 10;
const PAGE: usize = 4096;

/// The class of a block of `size` bytes (at least 1, at most [`LARGE`]), and the class's size.
fn class_of(size: usize) -> (usize, usize) {
    if size <= SMALL_MAX {
        let c = size.div_ceil(MIN_ALIGN).max(1);
        (c - 1, c * MIN_ALIGN)
    } else {
        let bits = usize::BITS - (size - 1).leading_zeros();
        // SMALL_MAX is 2^10: 1025..=2048 is the first power-of-two class.
        let c = SMALL_CLASSES + (bits as usize - 11);
        (c, 1 << bits)
    }
}

struct State {
    /// Each class's free blocks, linked through their first word.
    free: [*mut u8; CLASSES],
    /// The unused rest of the current chunk.
    next: usize,
    end: usize,
    /// Where the current chunk starts.
    base: usize,
    /// Where the current chunk's present part ends (a chunk after the first).
    present: usize,
    /// Cleared when the kernel refuses `MADV_POPULATE_WRITE` (before Linux 5.14): page faults
    /// then make each page present, as in the first chunk.
    populate: bool,
}

/// The allocator: put `#[global_allocator] static A: Alloc = Alloc::new();` in the binary.
pub struct Alloc {
    lock: AtomicBool,
    state: core::cell::UnsafeCell<State>,
}

// SAFETY: `state` is only touched with `lock` held.
unsafe impl Sync for Alloc {}

impl Alloc {
    pub const fn new() -> Self {
        Alloc {
            lock: AtomicBool::new(false),
            state: core::cell::UnsafeCell::new(State {
                free: [null_mut(); CLASSES],
                next: 0,
                end: 0,
                base: 0,
                present: 0,
                populate: true,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held, so this is the only reference.
        let r = f(unsafe { &mut *self.state.get() });
        self.lock.store(false, Ordering::Release);
        r
    }
}

impl Default for Alloc {
    fn default() -> Self {
        Self::new()
    }
}

fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        null_mut()
    } else {
        p.cast()
    }
}

fn pages(size: usize) -> Option<usize> {
    size.checked_add(PAGE - 1).map(|s| s & !(PAGE - 1))
}

impl State {
    fn take(&mut self, class: usize, size: usize) -> *mut u8 {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: a block on a free list is ours, at least 16 bytes, and its first word
            // holds the next block (written by `give`).
            self.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let align = block_align(size);
        let mut start = (self.next + align - 1) & !(align - 1);
        if self.next == 0 || start + size > self.end {
            // A small first chunk, enough for a pass-through call, then 1 MiB ones. What is
            // left of the chunk before is not used again: at most a block's worth.
            let first = self.next == 0;
            let len = if first { FIRST_CHUNK } else { CHUNK };
            // A class block is at most LARGE, a page multiple: one fits in a chunk this long.
            let len = len.max(size);
            let chunk = map(len);
            if chunk.is_null() {
                return null_mut();
            }
            self.next = chunk as usize;
            self.base = self.next;
            self.end = self.next + len;
            // The first chunk is left to page faults: a pass-through call touches a few of its
            // pages, and making 64 KiB present costs it more than they do.
            self.present = if first { self.end } else { self.next };
            start = self.next;
        }
        self.next = start + size;
        self.make_present();
        start as *mut u8
    }

    /// Makes the current chunk present up to the step that holds `next`: one call fills a step
    /// for less than a page fault per page costs (a trap each; on a VM, each may exit to the
    /// hypervisor), while pages beyond what is carved stay untouched (each costs its zeroing
    /// and accounting: a 256 KiB chunk made present whole cost a create without GPUs 0.1 ms).
    fn make_present(&mut self) {
        if self.next <= self.present {
            return;
        }
        // Whole steps from where the present part ends, so from the chunk's start (steps on
        // address boundaries made the first one a few pages, and a call of its own): one step
        // first, then two at a time, which is about what a create carves after its first
        // chunk (8 GPUs: 192 KiB, in two calls).
        let step = if self.present == self.base {
            STEP
        } else {
            2 * STEP
        };
        let to = (self.present + (self.next - self.present).div_ceil(step) * step).min(self.end);
        if self.populate {
            // SAFETY: `present..to` lies in the current chunk, a private anonymous mapping of
            // ours; populating it writes no byte that a block holds (they are zero, or it is
            // already present and left as it is).
            let rc = unsafe {
                libc::madvise(
                    self.present as *mut libc::c_void,
                    to - self.present,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            // EINVAL: a kernel without it; anything else (ENOMEM) leaves the pages to faults,
            // which report a real lack of memory as they would have anyway.
            if rc != 0 {
                self.populate = false;
            }
        }
        self.present = to;
    }

    /// Grows `block`, of `old` bytes, to `new` bytes where it is, when it is the last block
    /// carved, the chunk has the room, and it sits on the alignment of the new size's class.
    fn grow_last(&mut self, block: *mut u8, old: usize, new: usize) -> bool {
        let at = block as usize;
        if at + old != self.next || at % block_align(new) != 0 || new > self.end - at {
            return false;
        }
        self.next = at + new;
        self.make_present();
        true
    }

    fn give(&mut self, class: usize, block: *mut u8) {
        // SAFETY: the caller hands back a block of this class that it no longer uses.
        unsafe { block.cast::<*mut u8>().write(self.free[class]) };
        self.free[class] = block;
    }
}

/// The alignment of a class's blocks: power-of-two blocks start on a multiple of their size, up
/// to a page, so that they serve alignments that large; the others on 16 bytes.
fn block_align(class_size: usize) -> usize {
    if class_size <= SMALL_MAX {
        MIN_ALIGN
    } else {
        class_size.min(PAGE)
    }
}

/// The class that serves a request, if one does: a request aligned beyond 16 bytes goes to a
/// power-of-two class at least as large as its alignment. `dealloc` and `realloc` get the same
/// layout back, so they find the same class.
fn in_class(layout: Layout) -> Option<(usize, usize)> {
    let want = if layout.align() <= MIN_ALIGN {
        layout.size()
    } else if layout.align() <= PAGE {
        layout.size().max(layout.align()).max(SMALL_MAX + 1)
    } else {
        return None;
    };
    (want <= LARGE).then(|| class_of(want))
}

// SAFETY: every block handed out is at least `layout.size()` bytes aligned to `layout.align()`
// (a class block by `take`'s carving, a mapping by the page), and no two live blocks overlap:
// a block is on a free list or handed out, never both.
unsafe impl GlobalAlloc for Alloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match in_class(layout) {
            Some((class, size)) => self.with(|s| s.take(class, size)),
            // A mapping is page-aligned: a larger alignment is not served.
            None if layout.align() <= PAGE => pages(layout.size()).map_or(null_mut(), map),
            None => null_mut(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match in_class(layout) {
            Some(_) => {
                let p = unsafe { self.alloc(layout) };
                if !p.is_null() {
                    unsafe { ptr::write_bytes(p, 0, layout.size()) };
                }
                p
            }
            // A fresh mapping is zero already.
            None => unsafe { self.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match in_class(layout) {
            Some((class, _)) => self.with(|s| s.give(class, block)),
            None => {
                if let Some(len) = pages(layout.size()) {
                    // SAFETY: the block is a mapping of `len` bytes that `alloc` made.
                    unsafe { libc::munmap(block.cast(), len) };
                }
            }
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return null_mut();
        };
        match (in_class(layout), in_class(new)) {
            // The same class: the block already has the room.
            (Some((a, _)), Some((b, _))) if a == b => block,
            // A larger class, and the block is the last one carved: it grows where it is.
            (Some((a, old)), Some((b, new)))
                if b > a && self.with(|s| s.grow_last(block, old, new)) =>
            {
                block
            }
            (None, None) => match (pages(layout.size()), pages(new_size)) {
                (Some(old_len), Some(new_len)) => {
                    // SAFETY: the block is a mapping of `old_len` bytes that `alloc` made; the
                    // kernel moves it, contents and all, where it needs to.
                    let p = unsafe {
                        libc::mremap(block.cast(), old_len, new_len, libc::MREMAP_MAYMOVE)
                    };
                    if p == libc::MAP_FAILED {
                        null_mut()
                    } else {
                        p.cast()
                    }
                }
                _ => null_mut(),
            },
            _ => {
                // SAFETY: GlobalAlloc's contract: a new block, the old contents copied, the
                // old block freed.
                unsafe {
                    let p = self.alloc(new);
                    if !p.is_null() {
                        ptr::copy_nonoverlapping(block, p, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                    p
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn classes_cover_every_size_once_and_fit_it() {
        let mut last = class_of(1);
        assert_eq!(last, (0, MIN_ALIGN));
        for size in 1..=LARGE {
            let (class, class_size) = class_of(size);
            assert!(class < CLASSES && class_size >= size, "{size}");
            assert!(class >= last.0, "{size}");
            if class == last.0 {
                assert_eq!(class_size, last.1);
            }
            last = (class, class_size);
        }
        assert_eq!(last, (CLASSES - 1, LARGE));
    }

    /// The first chunks are smaller than a class's largest block: a first request of any class
    /// size gets a chunk that holds it, and the blocks after it come from the next chunks.
    #[test]
    fn a_first_block_larger_than_the_first_chunks_fits() {
        for first in [FIRST_CHUNK + 1, STEP + 1, LARGE] {
            let a = Alloc::new();
            let mut live = Vec::new();
            for size in [first, 16, FIRST_CHUNK, LARGE, 100, LARGE] {
                let layout = Layout::from_size_align(size, 4096).unwrap();
                let p = unsafe { a.alloc(layout) };
                assert!(
                    !p.is_null() && p as usize % 4096 == 0,
                    "{first} then {size}"
                );
                unsafe { ptr::write_bytes(p, 0xa5, size) };
                live.push((p as usize, size));
            }
            live.sort_unstable();
            for w in live.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "{first}: {w:?} overlap");
            }
        }
    }

    /// Blocks of every size and alignment the allocator serves: aligned as asked, not
    /// overlapping, their contents kept through a realloc to every other size.
    #[test]
    fn blocks_are_aligned_disjoint_and_keep_their_contents() {
        let a = Alloc::new();
        let sizes = [
            1,
            7,
            16,
            17,
            48,
            1000,
            1024,
            1025,
            4096,
            5000,
            LARGE,
            LARGE + 1,
            3 << 20,
        ];
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut tag = 0u8;
        for &size in &sizes {
            for align in [1, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let p = unsafe { a.alloc(layout) };
                assert!(!p.is_null(), "{size} {align}");
                assert_eq!(p as usize % align, 0, "{size} {align}");
                tag = tag.wrapping_add(1);
                unsafe { ptr::write_bytes(p, tag, size) };
                live.push((p, layout, tag));
            }
        }
        let check = |live: &[(*mut u8, Layout, u8)]| {
            for &(p, l, t) in live {
                let s = unsafe { core::slice::from_raw_parts(p, l.size()) };
                assert!(s.iter().all(|b| *b == t), "{l:?}");
            }
        };
        check(&live);
        // Grow and shrink each through every other size; the common prefix must survive.
        for (i, entry) in live.iter_mut().enumerate() {
            let (p, l, t) = *entry;
            let to = sizes[(i + 5) % sizes.len()];
            let q = unsafe { a.realloc(p, l, to) };
            assert!(!q.is_null());
            assert_eq!(q as usize % l.align(), 0);
            let kept = unsafe { core::slice::from_raw_parts(q, l.size().min(to)) };
            assert!(kept.iter().all(|b| *b == t), "{l:?} -> {to}");
            unsafe { ptr::write_bytes(q, t, to) };
            *entry = (q, Layout::from_size_align(to, l.align()).unwrap(), t);
        }
        check(&live);
        for &(p, l, _) in &live {
            unsafe { a.dealloc(p, l) };
        }
    }

    /// A block that grows while it is the last one carved stays where it is, through small and
    /// power-of-two classes, with its contents; one that is not the last moves, contents and
    /// all, and the block after it is untouched.
    #[test]
    fn the_last_block_grows_in_place_and_others_move() {
        let a = Alloc::new();
        // Past the first chunk, so that the chunk is a fresh 1 MiB one with room.
        let big = Layout::from_size_align(FIRST_CHUNK, 8).unwrap();
        let filler = unsafe { a.alloc(big) };
        let mut l = Layout::from_size_align(4096, 8).unwrap();
        let p = unsafe { a.alloc(l) };
        unsafe { ptr::write_bytes(p, 0x5a, l.size()) };
        for size in [8192, 16384, 65536, LARGE] {
            let q = unsafe { a.realloc(p, l, size) };
            assert_eq!(q, p, "{} -> {size}", l.size());
            let kept = unsafe { core::slice::from_raw_parts(q, l.size()) };
            assert!(kept.iter().all(|b| *b == 0x5a), "{size}");
            unsafe { ptr::write_bytes(q, 0x5a, size) };
            l = Layout::from_size_align(size, 8).unwrap();
        }
        // A small block followed by another: growing it moves it.
        let s = Layout::from_size_align(48, 8).unwrap();
        let first = unsafe { a.alloc(s) };
        let second = unsafe { a.alloc(s) };
        unsafe { ptr::write_bytes(first, 1, 48) };
        unsafe { ptr::write_bytes(second, 2, 48) };
        let moved = unsafe { a.realloc(first, s, 96) };
        assert_ne!(moved, first);
        let kept = unsafe { core::slice::from_raw_parts(moved, 48) };
        assert!(kept.iter().all(|b| *b == 1));
        let after = unsafe { core::slice::from_raw_parts(second, 48) };
        assert!(after.iter().all(|b| *b == 2));
        // The grown block went back to its new class: the next request of it gets it.
        unsafe { a.dealloc(p, l) };
        assert_eq!(unsafe { a.alloc(l) }, p);
        unsafe { a.dealloc(filler, big) };
    }

    /// Resident pages of `len` bytes at `p`, as `mincore` reports them.
    fn resident(p: usize, len: usize) -> Vec<bool> {
        let mut v = std::vec![0u8; len / PAGE];
        let rc = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().map(|b| b & 1 == 1).collect()
    }

    /// A chunk after the first is made present up to the step that holds what was carved, and
    /// no further (where the kernel has `MADV_POPULATE_WRITE`, as every kernel CI runs on).
    #[test]
    fn a_chunk_is_made_present_a_step_at_a_time() {
        let a = Alloc::new();
        // Fill the first chunk, then carve one page of the second.
        let big = Layout::from_size_align(FIRST_CHUNK, 8).unwrap();
        let _first = unsafe { a.alloc(big) };
        let page = Layout::from_size_align(PAGE, PAGE).unwrap();
        let p = unsafe { a.alloc(page) } as usize;
        let (start, end) = a.with(|s| (s.end - CHUNK, s.end));
        assert_eq!(p, start, "a fresh chunk");
        let steps = |s: usize| -> (usize, usize) {
            let r = resident(start, CHUNK);
            let present = r.iter().take_while(|b| **b).count();
            assert_eq!(
                r.iter().filter(|b| **b).count(),
                present,
                "present pages in one run from the start: {s}"
            );
            (present, r.len())
        };
        let step_pages = STEP / PAGE;
        // Steps count from the chunk's start.
        assert_eq!(steps(0), (step_pages, CHUNK / PAGE));
        // Carving past the step makes the next one present, and not the one after.
        let more = Layout::from_size_align(STEP, PAGE).unwrap();
        let q = unsafe { a.alloc(more) } as usize;
        assert!(q + STEP <= end);
        // Then two steps at a time.
        assert_eq!(steps(1).0, 3 * step_pages);
    }

    /// A freed block is handed out again for its class, so a steady alloc/free loop does not
    /// grow the memory in use.
    #[test]
    fn freed_blocks_are_reused() {
        let a = Alloc::new();
        let l = Layout::from_size_align(100, 8).unwrap();
        let first = unsafe { a.alloc(l) };
        unsafe { a.dealloc(first, l) };
        for _ in 0..10_000 {
            let p = unsafe { a.alloc(l) };
            assert_eq!(p, first);
            unsafe { a.dealloc(p, l) };
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_even_when_reused() {
        let a = Alloc::new();
        for size in [24, 3000, LARGE + 10] {
            let l = Layout::from_size_align(size, 8).unwrap();
            let p = unsafe { a.alloc(l) };
            unsafe { ptr::write_bytes(p, 0xAA, size) };
            unsafe { a.dealloc(p, l) };
            let z = unsafe { a.alloc_zeroed(l) };
            let s = unsafe { core::slice::from_raw_parts(z, size) };
            assert!(s.iter().all(|b| *b == 0), "{size}");
            unsafe { a.dealloc(z, l) };
        }
    }

    #[test]
    fn alignment_beyond_a_page_is_refused_not_misserved() {
        let a = Alloc::new();
        let l = Layout::from_size_align(64, 8192).unwrap();
        assert!(unsafe { a.alloc(l) }.is_null());
    }

    /// Threads allocating and freeing at once never get the same block.
    #[test]
    fn threads_share_it_safely() {
        static A: Alloc = Alloc::new();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let l = Layout::from_size_align(64, 16).unwrap();
                    for _ in 0..20_000 {
                        let p = unsafe { A.alloc(l) };
                        unsafe { ptr::write_bytes(p, t, 64) };
                        std::thread::yield_now();
                        let s = unsafe { core::slice::from_raw_parts(p, 64) };
                        assert!(s.iter().all(|b| *b == t));
                        unsafe { A.dealloc(p, l) };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
