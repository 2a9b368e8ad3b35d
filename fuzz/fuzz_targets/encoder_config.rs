#![no_main]
//! `gateway::fuzzing::encoder_config`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("encoder_config", data, gateway::fuzzing::encoder_config);
});
