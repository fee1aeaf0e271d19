/** Targets for tests: a language under a profile's knobs (lavapipe's by default: serial rows, as CI runs). */
import { PROFILES, type TargetProfile } from "../../compiler/targets/profiles.ts";
import { type Language, makeTarget, type Target } from "../../compiler/targets/target.ts";

export const target = (
  language: Language,
  profile: TargetProfile = PROFILES.lavapipe,
  libraryGemms = true,
): Target => {
  const t = makeTarget(profile, language);
  return libraryGemms ? t : { ...t, implements: { ...t.implements, gemm: "template" } };
};
