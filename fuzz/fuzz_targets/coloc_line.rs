#![no_main]
//! `gateway::fuzzing::coloc_line`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("coloc_line", data, gateway::fuzzing::coloc_line);
});
