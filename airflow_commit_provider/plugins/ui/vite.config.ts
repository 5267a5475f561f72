// The Commit status view as one UMD module that Airflow's UI imports (react_apps). React comes from the host page
// (Airflow sets globalThis.React, ReactDOM, ReactJSXRuntime); Chakra UI is bundled, and themed with Airflow's own
// system (globalThis.ChakraUISystem) where the host provides it (Airflow 3.2+).
import react from "@vitejs/plugin-react";
import { resolve } from "node:path";
import { defineConfig } from "vite";
import cssInjectedByJsPlugin from "vite-plugin-css-injected-by-js";

export default defineConfig({
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1600,
    lib: {
      entry: resolve(import.meta.dirname, "src/main.tsx"),
      fileName: () => "commit-status.js",
      formats: ["umd"],
      name: "AirflowPlugin",
    },
    rollupOptions: {
      external: ["react", "react-dom", "react/jsx-runtime"],
      output: {
        globals: { react: "React", "react-dom": "ReactDOM", "react/jsx-runtime": "ReactJSXRuntime" },
      },
    },
  },
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  plugins: [react(), cssInjectedByJsPlugin()],
});
