/** Renderer entry: one store, one transport, one bridge between them, then React. */
// First: before any module builds a schema.
import './zod-config';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { startBridge } from './bridge/bridge';
import { AppContext } from './bridge/context';
import { App } from './components/App';
import { createAppStore } from './store';
import { createTransport } from './transport';
import './styles.css';

const store = createAppStore();
const bridge = startBridge(createTransport(), store);
const root = document.getElementById('root');
if (!root) throw new Error('index.html has no #root');
createRoot(root).render(
  <StrictMode>
    <AppContext.Provider value={{ store, bridge }}>
      <App />
    </AppContext.Provider>
  </StrictMode>,
);
