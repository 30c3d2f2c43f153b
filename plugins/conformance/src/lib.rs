//! The `conformance` plugin: the tools the official MCP conformance suite's server scenarios call,
//! answering as the suite's scenario descriptions ask.

use std::time::Duration;

moat_guest::generate!("conformance");

use moat::plugin::content::{Audio, Image};
use moat::plugin::log::{Level, log};
use moat::plugin::progress::report;

/// A 1×1 red pixel.
const RED_PIXEL_PNG: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// The pause the suite asks for between notifications.
const PAUSE: Duration = Duration::from_millis(50);

struct Conformance;

impl Guest for Conformance {
    fn simple_text() -> ContentBlock {
        ContentBlock::Text("This is a simple text response for testing.".into())
    }

    fn image_content() -> ContentBlock {
        ContentBlock::Image(Image {
            data: RED_PIXEL_PNG.to_vec(),
            mime_type: "image/png".into(),
        })
    }

    fn audio_content() -> ContentBlock {
        ContentBlock::Audio(Audio {
            data: silent_wav(8000, 80),
            mime_type: "audio/wav".into(),
        })
    }

    fn tool_with_logging() -> String {
        log(Level::Info, "Tool execution started");
        std::thread::sleep(PAUSE);
        log(Level::Info, "Tool processing data");
        std::thread::sleep(PAUSE);
        log(Level::Info, "Tool execution completed");
        "Logged three messages.".into()
    }

    fn tool_with_progress() -> String {
        for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if step > 0 {
                std::thread::sleep(PAUSE);
            }
            report(progress, Some(100.0), None);
        }
        "Reported progress three times.".into()
    }

    fn logging_tool() -> String {
        log(Level::Info, "A message for clients that asked for logs");
        "Logged one message.".into()
    }

    fn error_handling() -> Result<String, String> {
        Err("This tool intentionally returns an error for testing".into())
    }
}

/// A mono 8-bit PCM WAV file of `samples` samples of silence at `rate` Hz.
fn silent_wav(rate: u32, samples: u32) -> Vec<u8> {
    let mut wav = Vec::with_capacity(44 + samples as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + samples).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // size of the format chunk
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&rate.to_le_bytes()); // bytes per second
    wav.extend_from_slice(&1u16.to_le_bytes()); // bytes per frame
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&samples.to_le_bytes());
    wav.resize(44 + samples as usize, 0x80); // 8-bit PCM is unsigned: 0x80 is silence
    wav
}

export!(Conformance);
