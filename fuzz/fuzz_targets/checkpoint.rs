#![no_main]
//! `gateway::fuzzing::checkpoint`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("checkpoint", data, gateway::fuzzing::checkpoint);
});
