// Times as the rest of Airflow's UI shows them: in the time zone the user chose in the UI (its "timezone" key in
// localStorage, which the UI keeps as JSON), else the browser's own.
import { useSyncExternalStore } from "react";

const browserZone = (): string => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

export const selectedZone = (): string => {
  let raw: string | null = null;
  try { raw = globalThis.localStorage.getItem("timezone"); } catch { return browserZone(); }
  if (!raw) return browserZone();
  let zone: unknown = raw;
  try { zone = JSON.parse(raw); } catch { /* a bare string */ }
  if (typeof zone !== "string" || !zone) return browserZone();
  try { new Intl.DateTimeFormat("en-US", { timeZone: zone }); } catch { return browserZone(); }
  return zone;
};

const subscribe = (notify: () => void): (() => void) => {
  // "storage": another tab; "local-storage": the UI's own hook, in this tab
  globalThis.addEventListener("storage", notify);
  globalThis.addEventListener("local-storage", notify);
  return () => {
    globalThis.removeEventListener("storage", notify);
    globalThis.removeEventListener("local-storage", notify);
  };
};

export const useTimeZone = (): string => useSyncExternalStore(subscribe, selectedZone);

/** "2026-01-01 13:00:00" in *zone* (the UI's own format), or "" for no time. */
export const formatTime = (iso: string | null | undefined, zone: string): string => {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-CA", {
    timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23",
  }).formatToParts(date).map((p) => [p.type, p.value]));
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}`;
};

/** The zone's short name ("GMT+5:30", "CET") at *iso* (now when there is no time on the page). */
export const zoneAbbreviation = (iso: string | null | undefined, zone: string): string => {
  const part = new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "short" })
    .formatToParts(iso ? new Date(iso) : new Date()).find((p) => p.type === "timeZoneName");
  return part?.value ?? zone;
};
